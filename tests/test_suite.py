"""The validation suite's runner: papermill executes the experiment notebooks with injected parameters, verdicts land in
verdict.json, a failing notebook still leaves its executed copy and a FAIL verdict. On the tiny config-built model (seconds)."""
import json, subprocess, sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "experiments" / "gpu" / "run_gpu_suite.py"


def test_a_parameter_passed_to_the_runner_reaches_the_notebook(tmp_path):
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, str(RUNNER), "--experiment", "A", "--model", "tiny", "--n-clean", "13", "--seed", "3", "--out", str(out)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert res.returncode == 1, res.stdout + res.stderr          # INCONCLUSIVE on the tiny model is not a pass
    v = json.loads((out / "verdict.json").read_text())["A"]
    assert (v["params"]["n_clean"], v["params"]["seed"], v["params"]["model"]) == (13, 3, "tiny")
    assert (v["verdict"], v["trigger"]) == ("INCONCLUSIVE", "no gated regression")
    assert v["numbers"]["n_culprits"] > 0 and v["wall_s"] > 0
    executed = nbformat.read(out / "A.ipynb", as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and "n_clean = 13" in injected[0].source
    assert (out / "A" / "report" / "report.md").exists()
    assert "[suite] A: INCONCLUSIVE" in res.stdout


def test_bad_arguments_exit_2_without_a_traceback(tmp_path):
    res = subprocess.run([sys.executable, str(RUNNER), "--experiment", "A", "--poison-fraction", "1.5", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "poison_fraction" in res.stderr and "Traceback" not in res.stderr


def test_a_failing_notebook_leaves_its_copy_and_a_fail_verdict(tmp_path):
    from gradian.suite import SuiteParams, run_suite
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "python3", "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("out = 'x'\nseed = 0", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("raise RuntimeError(f'boom at seed {seed}')")]
    (tmp_path / "nbs").mkdir(); nbformat.write(nb, tmp_path / "nbs" / "B_broken.ipynb")
    [v] = run_suite(["B"], SuiteParams(seed=5), tmp_path / "out", tmp_path / "nbs", log=lambda s: None)
    assert v.verdict == "FAIL" and "boom at seed 5" in v.trigger, v
    assert (tmp_path / "out" / "B.ipynb").exists()
    assert json.loads((tmp_path / "out" / "verdict.json").read_text())["B"]["verdict"] == "FAIL"
