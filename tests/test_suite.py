"""The validation suite's runner: papermill executes the experiment notebooks with injected parameters, verdicts land in
verdict.json, a failing notebook still leaves its executed copy and a FAIL verdict. On the tiny config-built model (seconds)."""
import json, subprocess, sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "experiments" / "gpu" / "run_gpu_suite.py"


EXPECTED_ON_TINY = {"A": ("INCONCLUSIVE", "no gated regression"), "B": ("PASS", None), "C": ("INCONCLUSIVE", "nothing accused in round 1"),
                    "D": ("INCONCLUSIVE", "no gated regression in the buried case")}   # the tiny model learns nothing


def test_every_experiment_runs_and_a_runner_parameter_reaches_its_notebook(tmp_path):
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, str(RUNNER), "--all", "--model", "tiny", "--n-clean", "13", "--seed", "3", "--out", str(out)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=1200)
    assert res.returncode == 1, res.stdout + res.stderr          # an INCONCLUSIVE is not a pass
    verdicts = json.loads((out / "verdict.json").read_text())
    notebooks = sorted(p.name.split("_")[0] for p in (ROOT / "nbs" / "experiments").glob("*.ipynb"))
    assert sorted(verdicts) == notebooks and set(notebooks) <= set(EXPECTED_ON_TINY), (verdicts.keys(), notebooks)
    for e, v in verdicts.items():
        assert (v["params"]["n_clean"], v["params"]["seed"], v["params"]["model"]) == (13, 3, "tiny"), e
        assert (v["verdict"], v["trigger"]) == EXPECTED_ON_TINY[e], (e, v["verdict"], v["trigger"])
        assert v["wall_s"] > 0 and (Path(v["report"]) / "report.md").exists(), e
        executed = nbformat.read(out / f"{e}.ipynb", as_version=4)
        injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
        assert injected and "n_clean = 13" in injected[0].source, e
        assert f"[suite] {e}: {v['verdict']}" in res.stdout
    assert verdicts["A"]["numbers"]["n_culprits"] > 0
    assert verdicts["B"]["numbers"]["cases"]["clean"]["fired"] == [] and not verdicts["B"]["numbers"]["lead_checked"]


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
