"""Every optional extra in pyproject.toml resolves, with plain pip, into an environment without torchvision (whose PyPI wheels
break `import transformers` beside the CPU torch). `slow`: each resolution asks the package index (a dry run, nothing installed)."""
import json, subprocess, sys, tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
GPU_ONLY = {"unsloth"}              # needs a CUDA torch and torchvision by design: resolved on a GPU machine, not here


def test_no_extra_pulls_kronfluence_and_the_gpu_ones_are_named():
    "kronfluence would bring torchvision along: it is installed without dependencies (tools/setup_env.sh), never as an extra."
    assert not any("kronfluence" in d for deps in EXTRAS.values() for d in deps)
    assert GPU_ONLY <= set(EXTRAS)


@pytest.mark.slow
@pytest.mark.parametrize("extra", sorted(set(EXTRAS) - GPU_ONLY))
def test_extra_resolves_without_torchvision(extra, tmp_path):
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                        "-c", str(ROOT / "constraints" / "cpu.txt"), f"{ROOT}[{extra}]"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    names = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert "torchvision" not in names and "torch" in names, sorted(names)
