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


# the runner's flags that set a Gradian config key: named as the key's last part (gradian.cli.flags_for), checked like the key
CONFIG_KEYS = ("model.name_or_path", "training.backend", "training.epochs", "training.lr", "data.max_seq_length", "index.module_filter",
               "index.projection_dim", "index.fp16_store", "index.grad_batch_size", "training.seed")


def parse(argv=None):
    from gradian.cli import config_type
    t = lambda key, *none: dict(type=config_type(key, *none), default=None)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every experiment that has a notebook")
    which.add_argument("--experiment", help="one or more of A,B,C,D,E (comma-separated)")
    ap.add_argument("--quick", action="store_true", help="fewer random-removal controls in C (5 instead of 8); the scenarios keep their size")
    ap.add_argument("--model", default="embedded", help="embedded (the shipped SmolLM2), tiny (config-built: plumbing only), an HF id or folder")
    ap.add_argument("--backend", metavar="NAME", help="training backend: hf, trl or unsloth (default: hf)", **t("training.backend"))
    ap.add_argument("--family", default="currency", help="fact family of the planted scenarios (gradian.scenarios.FAMILIES)")
    ap.add_argument("--n-clean", type=int, default=120)
    ap.add_argument("--poison-fraction", type=float, default=0.2)
    ap.add_argument("--epochs", **t("training.epochs"))
    ap.add_argument("--lr", help="learning rate (default: the suite's 1e-3)", **t("training.lr"))
    ap.add_argument("--max-seq-length", help="default: the suite's 256", **t("data.max_seq_length"))
    ap.add_argument("--module-filter", **t("index.module_filter"))
    ap.add_argument("--projection-dim", help="JL dimension per block; 0 or none stores exact gradients",
                    **t("index.projection_dim", ("none", "exact", "null", "0")))
    ap.add_argument("--fp16-store", action="store_true")
    ap.add_argument("--grad-batch-size", **t("index.grad_batch_size"))
    ap.add_argument("--seed", help="the run's seed (training.seed): training, scenarios, tiny model, controls", **t("training.seed"))
    ap.add_argument("--lco-clusters", type=int, default=10, help="experiment E: clusters left out one at a time (one training each, plus one)")
    ap.add_argument("--engines", default="datainf,graddot,repsim,ekfac", help="experiment E: engines whose predictions are checked")
    ap.add_argument("--lds-subsets", type=int, default=0, help="experiment E: also retrain on this many random halves for the linear datamodeling score (0: none)")
    ap.add_argument("--removal", default="mask", choices=["mask", "drop"],
                    help="experiment E: how a retraining leaves rows out: mask (the full run's batches, the rows with no loss) or drop (removed; batches reshuffle)")
    ap.add_argument("--out", default=None, help="results folder (default experiments/gpu/results/<stamp>)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse(argv)
    from gradian.core import GradianError
    from gradian.suite import EXPERIMENTS, SuiteParams, run_suite, suite_config
    try:
        from gradian.cli import apply_flags, flags_for
        p = SuiteParams(apply_flags(suite_config(), a, flags_for(*CONFIG_KEYS)), family=a.family, n_clean=a.n_clean,
                        poison_fraction=a.poison_fraction, quick=a.quick, lco_clusters=a.lco_clusters, engines=a.engines,
                        lds_subsets=a.lds_subsets, removal=a.removal).check()
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
