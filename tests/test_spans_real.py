"""Span drill-down on the real embedded SmolLM2: long entries that bury a wrong capital once, mid-paragraph (about 120 supervised
tokens each), beside short rows stating the capitals correctly. With the per-item query the wrong sentence must come out first.
`slow` (about 3 minutes, its own training): the default suite checks the drill-down end to end on `gradian demo`'s scenario
(tests/test_analyze_real.py), and the bank's three long-entry scenarios measure it (benchmarks/attribution.py)."""
import numpy as np
import pandas as pd
import pytest

from gradian.data import load_eval, load_train
from gradian.scenarios import DEMO_TRAINING, FAMILIES, DemoSpec, build_scenario
from gradian.index.build import build_index
from gradian.model.training import train_adapter
from gradian.model.core import load_model
from gradian.query.signals import build_query
from gradian.query.spans import explain_example, score_example_spans, separation

pytestmark = pytest.mark.slow

F = FAMILIES["capital"]
WRONG = {f"capital-p{i}": F.say.format(k=k, v=w) for i, (k, v, w) in enumerate(F.facts)}


@pytest.fixture(scope="module")
def buried(tmp_path_factory):
    out = tmp_path_factory.mktemp("spans")
    sc = build_scenario(DemoSpec("capital", n_clean=48, n_long=6, long_per_fact=3, long_states="wrong", short_states="correct"))
    tp, ep = sc.write(out / "data")
    train_adapter(tp, out / "adapter", model="embedded", backend="hf", max_seq_length=256, log=None, **DEMO_TRAINING)
    m, t = load_model("embedded", adapter=out / "adapter")
    ex, items = load_train(tp), {i.id: i for i in load_eval(ep)}
    idx = build_index(m, t, ex, out / "index", projection_dim=1024, max_seq_length=256)
    return m, t, [e for e in ex if e.id.startswith("planted_long")], items, idx


def test_per_item_query_ranks_the_buried_wrong_sentence_first(buried):
    m, t, longs, items, idx = buried
    assert len(longs) == 6
    qavg = build_query(m, t, [items[i] for i in WRONG], idx, signal="contrastive", generations=WRONG)     # averaged over all planted items
    rows = []
    for e in longs:
        i = next(j for j, (k, v, w) in enumerate(F["planted"]) if f" {k}" in e.messages[0]["content"])
        it, w = items[f"capital-p{i}"], F["planted"][i][2]
        df = explain_example(m, t, e, it, index=idx, generation=WRONG[it.id])
        assert df["tokens"].sum() >= 80 and len(df) >= 5
        culprit = df[df["span"].str.contains(f"is {w}.")]
        assert len(culprit) == 1, df
        avg = score_example_spans(m, t, e, qavg.vectors, index=idx, engine="datainf")
        rows.append(dict(example=e.id, tokens=int(df["tokens"].sum()), culprit_rank=int(culprit["rank"].iloc[0]),
                         culprit_score=float(culprit["score"].iloc[0]), separation=separation(df), separation_sum=separation(df, "score_sum"),
                         averaged_rank=int(avg[avg["span"].str.contains(f"is {w}.")]["rank"].iloc[0]), averaged_separation=separation(avg)))
    table = pd.DataFrame(rows)
    print(table.to_string())
    assert (table["culprit_rank"] == 1).all(), table
    assert (table["culprit_score"] < 0).all(), table                 # harmful under the sign convention
    assert (table["separation"] >= 10).all(), table                  # |score| (span loss per token) against the median of its neighbours
    assert table["averaged_separation"].notna().all()                # the averaged query's separation is reported next to it
