"""benchmarks/sweeps.py on tiny settings: the damping table and plot from an experiment E verdict (the projection sweep itself is
checked in nbs/41_fidelity.ipynb on the tiny model; its embedded-model run needs a trained bank scenario)."""
import csv, json, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "sweeps.py"


def _verdict(damping):
    ci = lambda r: dict(spearman=r, lo=r - 0.3, hi=min(1.0, r + 0.2), n=10)
    return {"E": {"numbers": {"damping": {e: {str(l): ci(r) for l, r in by.items()} for e, by in damping.items()},
                              "random": dict(spearman=0.0, lo=-0.6, hi=0.6, n_draws=1000)}}}


def test_damping_sweep_writes_its_table_and_plot(tmp_path):
    v = tmp_path / "verdict.json"
    v.write_text(json.dumps(_verdict({"datainf": {0.001: 0.2, 0.01: 0.5, 0.1: 0.8, 1.0: 0.7}, "ekfac": {0.001: 0.4, 0.1: 0.9}})))
    r = subprocess.run([sys.executable, str(SCRIPT), "damping", "--verdict", str(v), "--out", str(tmp_path / "res")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(next((tmp_path / "res").glob("sweep-damping-*.csv")))))
    assert [(x["engine"], float(x["lambda_scale"]), float(x["spearman"])) for x in rows][:2] == [("datainf", 0.001, 0.2), ("datainf", 0.01, 0.5)]
    assert len(rows) == 6 and next((tmp_path / "res").glob("sweep-damping-*.png")).stat().st_size > 1000
    assert "ekfac    lambda_scale=0.1    Spearman +0.90 [+0.60, +1.00]" in r.stdout


def test_damping_sweep_refuses_a_verdict_without_one(tmp_path):
    v = tmp_path / "verdict.json"; v.write_text(json.dumps({"E": {"numbers": {"analysis_verdict": "refused"}}}))
    r = subprocess.run([sys.executable, str(SCRIPT), "damping", "--verdict", str(v), "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "holds no damping sweep" in r.stderr and "Traceback" not in r.stderr
