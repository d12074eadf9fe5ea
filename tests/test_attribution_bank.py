"""Attribution on scenarios of the bank, trained on the embedded SmolLM2 and diagnosed with the default settings, scored
against their answer keys with the benchmark's own code and held to the goals it prints (slow: about 12 minutes on 2 cores
for the wrong facts, 25 more for the behaviour; the whole bank is `python benchmarks/attribution.py`). The behaviour
scenario (a fine-tune that taught refusals of benign landmark questions, beside refusals of harmful requests) is of the
bank's held-out half, so no rule was tuned on it, and its key is proven by retraining (without the culprits 1.10 of the
regression recovers, without random rows -0.10). It FAILS today: under the default contrast weighting (raw) 5 of the 28
culprits are accused (recall 0.18, attribution-20261207-120822.json); under unit, 8 of its 12 legitimate refusals are
(accused precision 0.70, attribution-20261207-143419.json). Beside it a clean control must be refused."""
import importlib.util, statistics
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# the two scenarios the method failed before the midpoint index and the all-accused rule (a paragraph poison at 20%, and a
# sentence poison whose culprits fall into six embedding clusters), and the control that was once wrongly blamed
PLANTED, CONTROL = ["author-paragraph-20pct", "city-sentence-20pct"], "control-degrade-symbol"


def _bench():
    spec = importlib.util.spec_from_file_location("attribution_bench", ROOT / "benchmarks" / "attribution.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    bench, work = _bench(), tmp_path_factory.mktemp("bank")
    return bench, [bench.run(n, work, want_variants=False) for n in PLANTED + [CONTROL]]


def test_planted_scenarios_meet_the_goals(rows):
    bench, rows = rows
    planted = [r for r in rows if r["kind"] == "planted"]
    print(bench.table(rows))
    for r in planted:
        assert r["verdict"] == "attributed" and r["uptake"] >= 0.15, r
        for m, (goal_median, goal_worst) in bench.GOALS.items():
            if goal_worst is not None: assert r[m] is not None and r[m] >= goal_worst, (r["scenario"], m, r[m])
    for m, (goal_median, _) in bench.GOALS.items():
        assert statistics.median(r[m] or 0.0 for r in planted) >= goal_median, (m, [r[m] for r in planted])


def test_the_degradation_control_is_not_blamed(rows):
    bench, rows = rows
    ctrl = next(r for r in rows if r["scenario"] == CONTROL)
    assert ctrl["verdict"] != "attributed", ctrl


BEHAVIOUR, CLEAN = "refusal-landmark-held", "control-clean-currency"


@pytest.fixture(scope="module")
def behaviour_rows(tmp_path_factory):
    bench, work = _bench(), tmp_path_factory.mktemp("behaviour")
    return bench, {n: bench.run(n, work, want_variants=False) for n in (BEHAVIOUR, CLEAN)}


def test_the_behaviour_scenario_meets_the_worst_case_goals(behaviour_rows):
    bench, rows = behaviour_rows
    r = rows[BEHAVIOUR]
    print(bench.table(list(rows.values())))
    assert (r["kind"], r["half"], r["verdict"]) == ("refusal", "held", "attributed"), r
    for m, (goal_median, goal_worst) in bench.GOALS.items():
        floor = goal_worst if goal_worst is not None else goal_median       # AUC has one goal: it holds in every scenario
        assert r[m] is not None and r[m] >= floor, (m, r[m], floor)
    assert (r["accused_decoy_share"] or 0.0) <= 0.1, r["accused_decoy_share"]      # refusals of harmful requests


def test_the_clean_control_is_refused(behaviour_rows):
    assert behaviour_rows[1][CLEAN]["verdict"] != "attributed", behaviour_rows[1][CLEAN]
