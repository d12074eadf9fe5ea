#!/usr/bin/env python
"""Which correct side a contrastive query needs: one scenario's index, its regressed items' queries built several ways, each
scored by the default engine and measured against the answer key.

    python benchmarks/query_sides.py SCENARIO [--work benchmarks/work] [--out benchmarks/results]

Reads what `benchmarks/attribution.py --scenarios SCENARIO` left in --work (data, adapter, report with its index); loads the
embedded model once. The ways of building the query, all per item and at the tuned point:
  minimal pair      the default: the reference spliced into the tuned generation where the base model likes it best
  whole answers     the reference alone against the whole generation
  stated fact       the family's own sentence for the fact (e.g. "The currency of Japan is the yen.") against the generation
  base generation   the base model's own (correct) generation against the tuned one, both whole
  base sentence     the same, cut after the base generation's first sentence that contains the reference
  classic           the reference alone, no contrast
For each: the mean z-score of each kind of row (negative: the query says it caused the regression), AUC of culprits against
all decoys and against the same-form decoys alone, precision@k, and the kinds in the top k. Written to
benchmarks/results/query-sides-<scenario>-<stamp>.json."""
import argparse, json, re, sys, time
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from gradian.config import load_config
from gradian.data import load_eval
from gradian.engines import Engine
from gradian.index.store import GradientIndex
from gradian.model.core import load_model
from gradian.query.scorer import score_index
from gradian.query.signals import QueryPair, _sides, build_query
from gradian.scenarios import FAMILIES, SCENARIOS
from gradian.families import _fmt


def stated(spec, item_id):
    "The family's sentence for the fact an eval item asks (ids are <family>-<p|d><fact>-<wording>)."
    F = FAMILIES[spec.family]; tag = item_id.split("-")[-2]
    k, v = (F.facts if tag[0] == "p" else F.decoys)[int(tag[1:])][:2]
    return _fmt(F.say, k, v)


def first_sentence(text, answers):
    "`text` cut after its first sentence that contains one of `answers` (all of it when none does)."
    from gradian.evaluation import contains
    ends = [m.end() for m in re.finditer(r"[.!?](\s|$)", text)] + [len(text)]
    return next((text[:e].strip() for e in ends if contains(text[:e], answers)), text)


def shares_opening(base, tuned, words=2) -> bool:
    "Whether the tuned generation opens with the base generation's first `words` words (a wrong fact in the base's form)."
    w = lambda t: re.findall(r"\w+", t.lower())[:words]
    return w(base) == w(tuned)


def measure(s, kinds, ids=None) -> dict:
    "Metrics of scores `s` (negative: harmful) against the rows' kinds."
    z = (s - s.mean()) / (s.std() or 1); harm = -z
    cul, dec = kinds == "planted", np.char.startswith(kinds.astype(str), "decoy")
    same = dec & ~np.isin(kinds, ["decoy_format", "decoy_reverse", "decoy_concept", "decoy_long"])   # the behaviour, right there
    auc = lambda m: float(roc_auc_score(cul[cul | m], harm[cul | m])) if m.any() else None
    top = np.argsort(-harm)[:cul.sum()]
    u, c = np.unique(kinds[top], return_counts=True)
    top10 = [f"{kinds[i]}:{ids[i]}" for i in np.argsort(-harm)[:10]] if ids is not None else []
    return dict(top10=top10, mean_z={k: round(float(z[kinds == k].mean()), 2) for k in sorted(set(kinds))}, auc_vs_decoys=auc(dec),
                auc_vs_same_form=auc(same), precision_at_k=float(cul[top].mean()), top_k_kinds=dict(zip(u.tolist(), c.tolist())))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario"); ap.add_argument("--work", default="benchmarks/work"); ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--ways", help="comma-separated subset of the ways to build the query")
    ap.add_argument("--weighting", default="raw", choices=("raw", "unit"),
                    help="evaluation.contrast_weighting: the sides as they are (the default), or each scaled to length one")
    a = ap.parse_args(argv)
    spec, d = SCENARIOS[a.scenario], Path(a.work) / a.scenario
    if not (d / "report" / "report.json").exists(): sys.exit(f"run `python benchmarks/attribution.py --scenarios {a.scenario} --work {a.work}` first")
    key = json.loads((d / "data" / "answer_key.json").read_text())["key"]
    R = json.loads((d / "report" / "report.json").read_text())
    model, tok = load_model("embedded", d / "adapter")
    items = {i.id: i for i in load_eval(d / "data" / "eval.jsonl")}
    reg = [items[r["id"]] for r in R["regressed_items"]]
    tuned, base = ({r["id"]: r[k] for r in R["regressed_items"]} for k in ("tuned_output", "base_output"))
    idx = GradientIndex(d / "report" / "index"); kinds = np.array([key[i] for i in idx.ids])
    pair = lambda correct: [QueryPair(it.id, it.prompt, correct(it), tuned[it.id], "contrastive", "probe") for it in reg]
    only = set(a.ways.split(",")) if a.ways else None
    ways = {"minimal pair": dict(signal="contrastive", generations=tuned, minimal=True),
            "whole answers": dict(signal="contrastive", generations=tuned, minimal=False),
            "stated fact": dict(pairs=pair(lambda it: stated(spec, it.id))),
            "base generation": dict(pairs=pair(lambda it: base[it.id])),
            "base sentence": dict(pairs=pair(lambda it: first_sentence(base[it.id], it.answers))),
            "classic": dict(signal="classic")}
    eng, out = Engine.from_config(load_config(None).engine), dict(scenario=a.scenario, n_regressed=len(reg), weighting=a.weighting, ways={})
    sup = lambda te: tok.decode([t for t, m in zip(te.input_ids, te.supervised) if m])
    for name, kw in ways.items():
        if only and name not in only: continue
        q = build_query(model, tok, reg, idx, per_item=True, batch_size=8, weighting=a.weighting, **kw)
        p = q.pairs[0]
        example = dict(correct=p.correct, wrong=p.wrong, **(dict(zip(("loss_on_correct", "loss_on_wrong"), map(sup, _sides(tok, p, None))))
                                                              if p.wrong is not None else {}))
        S = score_index(idx, q, eng).scores
        left = np.array([not shares_opening(base[it.id], tuned[it.id]) for it in reg])   # the generation left the base's answer at once
        groups = {f"{int(left.sum())} items whose generation opens unlike the base model's": left,
                  f"{int((~left).sum())} items whose generation opens like it": ~left}
        out["ways"][name] = dict(**measure(S.mean(1), kinds, idx.ids), example=example,
                                 by_opening={g: measure(S[:, m].mean(1), kinds) for g, m in groups.items() if m.any()})
        print(f"{name:16s} {json.dumps(out['ways'][name])}", flush=True)
    path = Path(a.out) / f"query-sides-{a.scenario}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True); path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
