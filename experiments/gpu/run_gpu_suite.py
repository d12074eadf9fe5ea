#!/usr/bin/env python
"""Run Gradian's validation suite (experiments A-E, papermill notebooks in nbs/experiments/) and write the verdicts.

    python experiments/gpu/run_gpu_suite.py --experiment A --quick            # smoke test first, always
    python experiments/gpu/run_gpu_suite.py --all --model embedded            # the shipped SmolLM2-135M-Instruct, CPU is fine
    python experiments/gpu/run_gpu_suite.py --all --model unsloth/Llama-3.2-1B-Instruct --backend unsloth --n-clean 800

Each run writes experiments/gpu/results/<stamp>/ (or --out): the executed notebook of each experiment, its results folder
(the Gradian report included) and verdict.json (per experiment: verdict, trigger, advice, key numbers, parameters, wall time,
device). The exit code is 0 when every experiment passed, 1 otherwise, 2 on bad arguments."""
import argparse, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NB_DIR = ROOT / "nbs" / "experiments"


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every experiment that has a notebook")
    which.add_argument("--experiment", help="one or more of A,B,C,D,E (comma-separated)")
    ap.add_argument("--quick", action="store_true", help="fewer random-removal controls in C (5 instead of 8); the scenarios keep their size")
    ap.add_argument("--model", default="embedded", help="embedded (the shipped SmolLM2), tiny (config-built: plumbing only), an HF id or folder")
    ap.add_argument("--backend", default="hf", choices=["hf", "trl", "unsloth"])
    ap.add_argument("--family", default="currency", help="fact family of the planted scenarios (gradian.scenarios.FAMILIES)")
    ap.add_argument("--n-clean", type=int, default=120)
    ap.add_argument("--poison-fraction", type=float, default=0.2)
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--module-filter", default=None)
    ap.add_argument("--projection-dim", type=int, default=1024, help="JL dimension per block; 0 stores exact gradients")
    ap.add_argument("--fp16-store", action="store_true")
    ap.add_argument("--grad-batch-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-clusters", type=int, default=10, help="experiment E: clusters left out one at a time (one training each, plus one)")
    ap.add_argument("--engines", default="datainf,graddot,repsim,ekfac", help="experiment E: engines whose predictions are checked")
    ap.add_argument("--lds-subsets", type=int, default=0, help="experiment E: also retrain on this many random halves for the linear datamodeling score (0: none)")
    ap.add_argument("--removal", default="mask", choices=["mask", "drop"],
                    help="experiment E: how a retraining leaves rows out: mask (the full run's batches, the rows with no loss) or drop (removed; batches reshuffle)")
    ap.add_argument("--out", default=None, help="results folder (default experiments/gpu/results/<stamp>)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse(argv)
    from gradian.core import GradianError
    from gradian.suite import EXPERIMENTS, SuiteParams, run_suite
    try:
        p = SuiteParams(model=a.model, backend=a.backend, family=a.family, n_clean=a.n_clean, poison_fraction=a.poison_fraction, epochs=a.epochs,
                        lr=a.lr, max_seq_length=a.max_seq_length, module_filter=a.module_filter, projection_dim=a.projection_dim or None,
                        fp16_store=a.fp16_store, grad_batch_size=a.grad_batch_size, seed=a.seed, quick=a.quick,
                        n_clusters=a.n_clusters, engines=a.engines, lds_subsets=a.lds_subsets, removal=a.removal).check()
        have = sorted(e for e in EXPERIMENTS if list(NB_DIR.glob(f"{e}_*.ipynb")))
        exps = have if a.all else [e.strip().upper() for e in a.experiment.split(",")]
        if a.all and len(have) < len(EXPERIMENTS): print(f"[suite] no notebook yet for {', '.join(sorted(set(EXPERIMENTS) - set(have)))}")
        out = Path(a.out) if a.out else ROOT / "experiments" / "gpu" / "results" / time.strftime("%Y%m%d-%H%M%S")
        print(f"[suite] results: {out}")
        vs = run_suite(exps, p, out, NB_DIR)
    except GradianError as e:
        print(f"error: {e}", file=sys.stderr); return 2
    print(f"[suite] verdicts: {out / 'verdict.json'}")
    return 0 if vs and all(v.verdict == "PASS" for v in vs) else 1


if __name__ == "__main__":
    sys.exit(main())
