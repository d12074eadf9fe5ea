#!/usr/bin/env python
"""How thinly a regression's blame is spread over its culprits: from the per-item scores an attribution run saved.

    python benchmarks/blame_spread.py SCENARIO [SCENARIO ...] [--work benchmarks/work]

Reads <work>/<scenario>/scores.npz (written by `benchmarks/attribution.py`), takes each row's strength as `cluster.accuse`
does (its most harmful robust z over the score columns: every regressed item at every point of the path) and prints, for culprits
and for the other rows, its median and extreme and how many rows pass -6, -4 and -3. A planted wrong fact is carried by a few
rows with extreme z; a behaviour taught by many rows is not. Written to benchmarks/results/blame-spread-<stamp>.json."""
import argparse, json, time
from pathlib import Path

import numpy as np

from gradian.cluster import accuse


def spread(path: Path) -> dict:
    d = np.load(path, allow_pickle=True)
    S, cul = d["scores"], d["culprit"].astype(bool)
    strong = accuse(S)[1]                          # the accusation rule's own strength: each row's most harmful robust z
    part = lambda m: dict(n=int(m.sum()), median=round(float(np.median(strong[m])), 2), extreme=round(float(strong[m].min()), 2),
                          **{f"at_most_{t}": int((strong[m] <= -t).sum()) for t in (6, 4, 3)})
    return dict(columns=int(S.shape[1]), culprits=part(cul), others=part(~cul))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="+"); ap.add_argument("--work", default="benchmarks/work")
    ap.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args(argv)
    out = {n: spread(Path(a.work) / n / "scores.npz") for n in a.scenarios}
    for n, r in out.items(): print(f"{n:28s} {r['columns']} columns; culprits {r['culprits']}; others {r['others']}")
    path = Path(a.out) / f"blame-spread-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True); path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
