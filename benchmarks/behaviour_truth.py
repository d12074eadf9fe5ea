#!/usr/bin/env python
"""Ground truth of a scenario's answer key: retrain without its culprits, and without a random set of the same size.

    python benchmarks/behaviour_truth.py SCENARIO WORK [--same-form]

Needs what `benchmarks/attribution.py --scenarios SCENARIO --work WORK` left there (data and report); the two retrainings use
the bank's LoRA settings and are cached in WORK like the benchmark's. Prints the share of the regression each removal recovers
and writes benchmarks/results/behaviour-truth-<scenario>-<stamp>.json. With --same-form, a third retraining drops the rows that
share the culprits' form but are right where they stand (the refusals of harmful requests, ...): whether they cause the drop
too, which decides whether accusing them is wrong."""
import argparse, importlib.util, json, sys, time
from pathlib import Path
import numpy as np
spec_ = importlib.util.spec_from_file_location("bench", "benchmarks/attribution.py"); bench = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(bench)
from gradian.data import load_eval
from gradian.scenarios import SCENARIOS, build_scenario
name, work, same_form = sys.argv[1], Path(sys.argv[2]), "--same-form" in sys.argv[3:]
spec = SCENARIOS[name]; sc = build_scenario(spec); d = work / name
items = [i for i in load_eval(d / "data" / "eval.jsonl") if i.capability == sc.capability]
R = json.loads((d / "report" / "report.json").read_text())
cap = next(c for c in R["capabilities"] if c["name"] == sc.capability)
rng = np.random.default_rng(spec.seed)
drops = {"culprits": list(sc.culprits), "random": list(rng.choice([r["id"] for r in sc.train], len(sc.culprits), replace=False))}
if same_form: drops = {"same-form": [i for i, k in sc.key.items() if k.startswith("decoy_") and k != "decoy_format"]}
out = dict(scenario=name, base=cap["base"], tuned=cap["tuned"], delta=cap["delta"])
levels = argparse.Namespace(base=cap["base"], delta=cap["delta"])
for tag, drop in drops.items():
    out[tag] = bench.removal(spec, sc, d, drop, tag, items, levels)
    print(tag, out[tag], flush=True)
p = Path("benchmarks/results") / f"behaviour-truth-{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
p.write_text(json.dumps(out, indent=1) + "\n"); print("results:", p)
