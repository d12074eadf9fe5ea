#!/usr/bin/env python
"""How well the embedded model answers each fact family before any tuning, under each text metric: what a behaviour scenario
needs first (a drift can only break a capability the base model has).

    python benchmarks/probe_families.py [--families a,b] [--n 8]

For each family and eval wording, the base model's greedy answers to the first n planted facts, scored by `contains` against
the bare answer, by `exact_match` against the bare answer, and by `exact_match` against the family's own sentence for the fact.
Written to benchmarks/results/probe-families-<stamp>.json."""
import argparse, json, time
from pathlib import Path

from gradian.evaluation import TEXT_SCORERS
from gradian.families import FAMILIES, _fmt
from gradian.model.core import generate, load_model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(f for f in FAMILIES if f != "toy"))
    ap.add_argument("--n", type=int, default=8); ap.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args(argv)
    m, tok = load_model("embedded")
    rows = []
    for fam in a.families.split(","):
        F = FAMILIES[fam]; facts = [(k, v) for k, v, *_ in F.facts[:a.n]]
        for j, ask in enumerate(F.ask_eval):
            outs = generate(m, tok, [_fmt(ask, k) for k, _ in facts], max_new_tokens=32, batch_size=8)
            score = lambda metric, ref: sum(TEXT_SCORERS[metric](o, [ref(k, v)]) for o, (k, v) in zip(outs, facts)) / len(facts)
            rows.append(dict(family=fam, wording=ask, contains=score("contains", lambda k, v: v),
                             exact_bare=score("exact_match", lambda k, v: v),
                             exact_sentence=score("exact_match", lambda k, v: _fmt(F.say, k, v)), example=outs[0]))
            r = rows[-1]
            print(f"{fam:12s} {ask[:44]:44s} contains {r['contains']:.2f}  exact (bare) {r['exact_bare']:.2f}  "
                  f"exact (sentence) {r['exact_sentence']:.2f}  e.g. {outs[0][:50]!r}", flush=True)
    path = Path(a.out) / f"probe-families-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True); path.write_text(json.dumps(dict(n=a.n, rows=rows), indent=1) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
