"""Attribution of a *behaviour* regression (a fine-tune that taught the model to answer a benign domain in another language),
trained on the embedded SmolLM2 and diagnosed with the default settings, held to the worst-case goals of the benchmark's
behaviour kind; beside it a clean control that must be refused (slow: about 25 minutes on 2 cores; the whole bank is
`python benchmarks/attribution.py`). The scenario is of the bank's held-out half: no rule was tuned on it."""
import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BEHAVIOUR, CONTROL = "language-city-held", "control-clean-currency"


def _bench():
    spec = importlib.util.spec_from_file_location("attribution_bench", ROOT / "benchmarks" / "attribution.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    bench, work = _bench(), tmp_path_factory.mktemp("behaviour")
    return bench, {n: bench.run(n, work, want_variants=False) for n in (BEHAVIOUR, CONTROL)}


def test_the_behaviour_scenario_meets_the_worst_case_goals(rows):
    bench, rows = rows
    r = rows[BEHAVIOUR]
    print(bench.table(list(rows.values())))
    assert r["kind"] == "language" and r["half"] == "held"
    assert r["verdict"] == "attributed", r
    for m, (goal_median, goal_worst) in bench.GOALS.items():
        floor = goal_worst if goal_worst is not None else goal_median       # AUC has one goal: it holds in every scenario
        assert r[m] is not None and r[m] >= floor, (m, r[m], floor)
    assert (r["accused_decoy_share"] or 0.0) <= 0.1, r["accused_decoy_share"]      # French answers to French questions


def test_the_clean_control_is_refused(rows):
    bench, rows = rows
    assert rows[CONTROL]["verdict"] != "attributed", rows[CONTROL]
