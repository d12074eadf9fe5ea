#!/usr/bin/env python
"""The projection and damping sweeps: tables (JSON, CSV) and plots (PNG) in the results folder.

    python benchmarks/sweeps.py projection --scenario currency-sentence-small [--ks 256,512,1024,2048,8192]
    python benchmarks/sweeps.py damping --verdict experiments/gpu/results/<stamp>/verdict.json

projection: one bank scenario whose adapter `benchmarks/attribution.py` trained (benchmarks/work/<scenario>/adapter) is indexed
exactly and at each k; the query is the scenario's own minimal pairs (rebuilt from its saved report as `analyze` builds them);
per k: bytes per example, Spearman of the mean scores with the exact ones, and agreement of the per-item accused set with exact
(gradian.fidelity.projection_sweep).
damping: experiment E's leave-cluster-out retrainings scored at each lambda_scale (gradian.fidelity.leave_cluster_out records
them): per engine and value, the Spearman of predicted with measured changes and its bootstrap interval, beside the random band."""
import argparse, csv, json, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _fail(msg: str):
    print(f"error: {msg}", file=sys.stderr); sys.exit(2)


def _write(rows, out: Path, stem: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n")
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    return out / f"{stem}.json"


def damping_rows(verdict: dict) -> tuple[list, dict]:
    "Rows (engine, lambda_scale, spearman, lo, hi) from experiment E's verdict, and its random band."
    n = verdict["E"]["numbers"] if "E" in verdict else verdict["numbers"]
    if not n.get("damping"): _fail("this verdict holds no damping sweep (experiment E ran without a diagnosis, or before the sweep existed)")
    return [dict(engine=e, lambda_scale=float(lam), **{k: r[k] for k in ("spearman", "lo", "hi")}) for e, by in n["damping"].items() for lam, r in by.items()], n["random"]


def plot_damping(rows, band, path: Path):
    import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.axhspan(band["lo"], band["hi"], color="0.85", label="random scores (95% band)")
    for e in dict.fromkeys(r["engine"] for r in rows):
        rs = sorted((r for r in rows if r["engine"] == e), key=lambda r: r["lambda_scale"]); x = [r["lambda_scale"] for r in rs]
        ax.errorbar(x, [r["spearman"] for r in rs], yerr=[[r["spearman"] - r["lo"] for r in rs], [r["hi"] - r["spearman"] for r in rs]], marker="o", capsize=3, label=e)
    ax.set_xscale("log"); ax.set_xlabel("engine.lambda_scale"); ax.set_ylabel("Spearman, predicted vs retrained"); ax.set_ylim(-1.05, 1.05)
    ax.legend(fontsize=7); fig.tight_layout(); fig.savefig(path, dpi=120); plt.close(fig)


def plot_projection(rows, path: Path):
    import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    rs = [r for r in rows if r["k"] != "exact"]; x = [r["k"] for r in rs]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for key, lab in (("spearman_mean", "Spearman with exact (mean score)"), ("spearman_items_median", "Spearman with exact (per item, median)"),
                     ("accused_jaccard", "accused set vs exact (Jaccard)")):
        ax.plot(x, [r[key] for r in rs], marker="o", label=lab)
    ax.set_xscale("log", base=2); ax.set_xlabel("projection k per block"); ax.set_ylim(0, 1.02); ax.legend(fontsize=7)
    fig.tight_layout(); fig.savefig(path, dpi=120); plt.close(fig)


def projection(a):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from attribution import SCENARIOS, MSL, build_scenario, pairs_from_report
    from gradian.data import Example
    from gradian.fidelity import projection_sweep
    got = pairs_from_report(a.scenario, Path(a.work), report="report")
    if got is None: _fail(f"no saved report with regressed items for {a.scenario} in {a.work}: run benchmarks/attribution.py --scenarios {a.scenario} first")
    pairs, m, tok = got
    examples = [Example(r["id"], r["messages"]) for r in build_scenario(SCENARIOS[a.scenario]).train]
    t0 = time.perf_counter()
    rows = projection_sweep(m, tok, examples, pairs, Path(a.scratch) / a.scenario, ks=[int(k) for k in a.ks.split(",")], max_seq_length=MSL, log=print)
    stem = f"sweep-projection-{a.scenario}-{time.strftime('%Y%m%d-%H%M%S')}"
    path = _write(rows, Path(a.out), stem); plot_projection(rows, Path(a.out) / f"{stem}.png")
    for r in rows: print("  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    print(f"{len(examples)} examples, {len(pairs)} items, {time.perf_counter() - t0:.0f} s; table: {path}")


def damping(a):
    rows, band = damping_rows(json.loads(Path(a.verdict).read_text()))
    stem = f"sweep-damping-{time.strftime('%Y%m%d-%H%M%S')}"
    path = _write(rows, Path(a.out), stem); plot_damping(rows, band, Path(a.out) / f"{stem}.png")
    for r in rows: print(f"{r['engine']:8s} lambda_scale={r['lambda_scale']:<6g} Spearman {r['spearman']:+.2f} [{r['lo']:+.2f}, {r['hi']:+.2f}]")
    print(f"random scores: {band['spearman']:+.2f} [{band['lo']:+.2f}, {band['hi']:+.2f}]; table: {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("projection"); p.add_argument("--scenario", required=True); p.add_argument("--ks", default="256,512,1024,2048,8192")
    p.add_argument("--work", default="benchmarks/work"); p.add_argument("--scratch", default="benchmarks/work/sweeps")
    q = sub.add_parser("damping"); q.add_argument("--verdict", required=True)
    for s in (p, q): s.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args(argv)
    projection(a) if a.cmd == "projection" else damping(a)


if __name__ == "__main__":
    main()
