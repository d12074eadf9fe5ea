"""benchmarks/run.py as a user runs it. What a test can check without timing anything: scoring keeps memory flat however large
the store (every engine's pass reads it by windows), the GPU worker's code path (run on CPU here), and (slow) that `--quick`
prints its table. The speed figures themselves are the benchmark's output, never assertions."""
import json, subprocess, sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


def _run(*args, timeout=900):
    r = subprocess.run([sys.executable, str(RUN), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _result(*args) -> dict:
    return json.loads([l for l in _run(*args).stdout.splitlines() if l.startswith("RESULT ")][-1][7:])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from gradian.testing import synthetic_index
    return synthetic_index(tmp_path_factory.mktemp("store") / "s", 131_072, 2048, "bfloat16", n_blocks=2)     # 512 MB on disk


@pytest.mark.parametrize("engine", ["graddot", "datainf", "topk"])
def test_scoring_memory_stays_flat(store, engine):
    "Two passes over a 512 MB store (a warm-up and one timed) raise resident memory by far less than the store: mapped whole, it would add 512 MB."
    r = _result("--worker", "score", "--store", store.path, "--engine", engine, "--queries", 8, "--reps", 1)
    assert r["bytes"] > 500e6
    assert r["peak_rss"] - r["rss_before"] < 200e6, f"{engine}: resident memory grew by {(r['peak_rss'] - r['rss_before']) / 1e6:.0f} MB"


def test_paired_ratio_comes_from_its_rounds(store):
    "The paired DataInf/graddot worker times both in each round and reports the median and range of the per-round ratios."
    import statistics
    r = _result("--worker", "score", "--store", store.path, "--engine", "pair", "--queries", 8, "--reps", 3)
    ratios = sorted(d / g for g, d in r["rounds"])
    assert len(ratios) == 3 and all(g > 0 and d > 0 for g, d in r["rounds"])
    assert (r["ratio_lo"], r["ratio_median"], r["ratio_hi"]) == (ratios[0], statistics.median(ratios), ratios[-1])


def test_gpu_worker_code_path_on_cpu():
    r = _result("--worker", "gpu-score", "--device", "cpu", "--gpu-store-gb", 0.02, "--gpu-queries", "1,8", "--reps", 1)
    assert [q["queries"] for q in r["rows"]] == [1, 8] and all(q["gbs"] > 0 for q in r["rows"]) and r["store_gb"] > 0.019


@pytest.mark.slow
def test_quick_prints_the_table(tmp_path):
    out = _run("--quick", "--work", tmp_path / "work", "--json", tmp_path / "speed.json").stdout
    for row in ("index vs plain step (tiny)", "read bandwidth (torch sum)", "graddot, 8 queries", "graddot top-100", "datainf, 8 queries",
                "graddot, float16 store", "graddot, float32 store", "same, real-width store", "analyze (tiny fine-tune)"):
        assert row in out, row
    r = json.loads((tmp_path / "speed.json").read_text())
    assert r["scoring"]["datainf, 8 queries"]["x_graddot"] > 0 and r["bandwidth"]["gbs"] > 0
