"""On the embedded SmolLM2 with a LoRA on all seven projection types: scores from an index at the default
projection k agree with exact-gradient scores (median Spearman over queries >= 0.95, graddot and datainf)."""
import copy, statistics

import pytest

from gradian.config import IndexConfig
from gradian.data import EvalItem, Example
from gradian.index.build import build_index
from gradian.model.core import attach_lora
from gradian.query.scorer import rank_correlation, score_index
from gradian.query.signals import build_query

CAPS = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Egypt", "Cairo"), ("Peru", "Lima")]


@pytest.fixture(scope="module")
def tuned(smol_model):
    model, tok = smol_model
    return attach_lora(copy.deepcopy(model), r=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], seed=5).eval(), tok


def _train():
    rows = [(f"What is the capital of {c}?", f"The capital of {c} is {a}.") for c, a in CAPS]
    rows += [(f"What is {x} plus {y}?", f"{x} plus {y} is {x + y}.") for x, y in [(2, 3), (7, 8), (10, 5), (4, 4)]]
    rows += [(f"Write one sentence about {t}.", f"{t.capitalize()} makes an ordinary day a little better.") for t in ("tea", "rain", "music", "bread")]
    rows += [(f"What is the opposite of {w}?", f"The opposite of {w} is {o}.") for w, o in [("hot", "cold"), ("big", "small"), ("fast", "slow")]]
    return [Example(f"t{i}", [{"role": "user", "content": q}, {"role": "assistant", "content": a}]) for i, (q, a) in enumerate(rows)]


def test_default_k_ranks_like_exact_gradients(tuned, tmp_path):
    model, tok = tuned
    k = IndexConfig().projection_dim
    assert k is not None, "the default must be a projection for this test to mean anything"
    train = _train()
    exact = build_index(model, tok, train, tmp_path / "exact", projection_dim=None)
    proj = build_index(model, tok, train, tmp_path / "proj", projection_dim=k)
    assert proj.dim < exact.dim
    items = [EvalItem(f"q{i}", f"What is the capital of {c}?", [f"The capital of {c} is {a}."]) for i, (c, a) in enumerate(CAPS[:4])]
    gens = {f"q{i}": f"The capital of {c} is {CAPS[(i + 2) % 6][1]}." for i, (c, _) in enumerate(CAPS[:4])}
    qe = build_query(model, tok, items, exact, generations=gens, per_item=True)
    qp = build_query(model, tok, items, proj, generations=gens, per_item=True)
    for engine in ("graddot", "datainf"):
        se, sp = score_index(exact, qe, engine), score_index(proj, qp, engine)
        rhos = [rank_correlation(se.column(j), sp.column(j))["spearman"] for j in range(len(items))]
        assert statistics.median(rhos) >= 0.95, (engine, rhos)
