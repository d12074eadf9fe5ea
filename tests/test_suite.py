"""The validation suite's runner: papermill executes the experiment notebooks with injected parameters, verdicts land in
verdict.json, a failing notebook still leaves its executed copy and a FAIL verdict. On the tiny config-built model (seconds), and experiment A on the embedded model as CI runs it."""
import json, subprocess, sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "experiments" / "gpu" / "run_gpu_suite.py"


EXPECTED_ON_TINY = {"A": ("INCONCLUSIVE", "no gated regression"), "B": ("PASS", None), "C": ("INCONCLUSIVE", "nothing accused in round 1"),
                    "D": ("INCONCLUSIVE", "no gated regression in the buried case"),
                    "E": ("INCONCLUSIVE", "no diagnosis to check")}   # the tiny model learns nothing


def test_every_experiment_runs_and_a_runner_parameter_reaches_its_notebook(tmp_path):
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, str(RUNNER), "--all", "--model", "tiny", "--n-clean", "13", "--seed", "3", "--out", str(out)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=1200)
    assert res.returncode == 1, res.stdout + res.stderr          # an INCONCLUSIVE is not a pass
    verdicts = json.loads((out / "verdict.json").read_text())
    notebooks = sorted(p.name.split("_")[0] for p in (ROOT / "nbs" / "experiments").glob("*.ipynb"))
    assert sorted(verdicts) == notebooks and set(notebooks) <= set(EXPECTED_ON_TINY), (verdicts.keys(), notebooks)
    for e, v in verdicts.items():
        cfg = v["params"]["config"]                              # the whole Gradian config the experiment ran under
        assert (v["params"]["n_clean"], cfg["training"]["seed"], cfg["model"]["name_or_path"]) == (13, 3, "tiny"), e
        assert (v["verdict"], v["trigger"]) == EXPECTED_ON_TINY[e], (e, v["verdict"], v["trigger"])
        assert v["wall_s"] > 0 and (Path(v["report"]) / "report.md").exists(), e
        executed = nbformat.read(out / f"{e}.ipynb", as_version=4)
        injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
        assert injected and "n_clean = 13" in injected[0].source and "training.seed=3" in injected[0].source, e
        assert f"[suite] {e}: {v['verdict']}" in res.stdout
    assert verdicts["A"]["numbers"]["n_culprits"] > 0
    assert verdicts["B"]["numbers"]["cases"]["clean"]["fired"] == [] and not verdicts["B"]["numbers"]["lead_checked"]


def test_bad_arguments_exit_2_without_a_traceback(tmp_path):
    res = subprocess.run([sys.executable, str(RUNNER), "--experiment", "A", "--poison-fraction", "1.5", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "poison_fraction" in res.stderr and "Traceback" not in res.stderr


def test_a_failing_notebook_leaves_its_copy_and_a_fail_verdict(tmp_path):
    from gradian.suite import SuiteParams, run_suite, suite_config
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "python3", "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("out = 'x'\noverrides = []", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("raise RuntimeError(f'boom with {overrides}')")]
    (tmp_path / "nbs").mkdir(); nbformat.write(nb, tmp_path / "nbs" / "B_broken.ipynb")
    [v] = run_suite(["B"], SuiteParams(suite_config(["training.seed=5"])), tmp_path / "out", tmp_path / "nbs", log=lambda s: None)
    assert v.verdict == "FAIL" and "boom with ['training.seed=5']" in v.trigger, v
    assert (tmp_path / "out" / "B.ipynb").exists()
    assert json.loads((tmp_path / "out" / "verdict.json").read_text())["B"]["verdict"] == "FAIL"


@pytest.mark.slow          # 4 minutes; the same property on the same model is tests/test_analyze_real.py's capital scenario, run by default
def test_experiment_a_quick_passes_on_the_embedded_model(tmp_path):
    """Experiment A on the real embedded model, as CI runs it: the planted rows must be what is accused. Two epochs at twice
    the learning rate learn the poison in two thirds of the default's steps (about 4-5 minutes on 2 CPU cores)."""
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, str(RUNNER), "--experiment", "A", "--quick", "--model", "embedded", "--epochs", "2", "--lr", "2e-3",
                          "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=1500)
    v = json.loads((out / "verdict.json").read_text())["A"]
    assert res.returncode == 0 and v["verdict"] == "PASS", (v["verdict"], v["trigger"], res.stdout[-2000:], res.stderr[-2000:])
    n = v["numbers"]
    assert n["accused_precision"] >= 0.75 and n["precision_at_k"] >= 0.6 and n["delta"] < 0 and n["ci"][1] < 0, n
    cfg = v["params"]["config"]
    assert (cfg["model"]["name_or_path"], cfg["training"]["epochs"], cfg["training"]["lr"], v["params"]["quick"]) == ("embedded", 2.0, 2e-3, True)
    assert "embedded" in (out / "A.ipynb").read_text()           # the parameter reached the executed notebook
