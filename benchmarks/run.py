#!/usr/bin/env python
"""Gradian's speed as one table of ratios, every figure of a ratio measured in this run, on this machine.

    python benchmarks/run.py [--quick] [--rows N] [--dim D] [--queries M] [--json PATH]
    python benchmarks/run.py --device cuda ...        (what benchmarks/gpu_check.sh runs)

Rows:
  index vs plain step   tokens/s of `build_index` (forward, backward, per-example gradients, projection, write) over a plain
                        LoRA forward+backward on the same batches (benchmarks/index_throughput.py's workers, interleaved)
  read bandwidth        GB/s of a torch sum over an in-memory buffer as large as the store: the reference for scoring
  graddot               GB/s of scoring M queries against a synthetic store on disk (`gradian.testing.synthetic_index`,
                        with blocks of the default projection width, k=1024, its shards recached in huge pages as an index's are, the share printed; in the page cache after a warm-up pass), as a share of the read bandwidth; peak resident memory
                        of the scoring process (interpreter and torch included)
  graddot top-100       the same pass keeping only a running top-100 per query
  datainf               fit + score on the same store, as a multiple of graddot's time (it reads the store twice)
  datainf / graddot     the same ratio measured in pairs: graddot and datainf timed alternately in one process (10 rounds,
                        who goes first alternating), the median of the per-round ratios; this machine's speed drifts by
                        10-20% between runs, which the separate best-of figures above do not cancel; then the same pairs on a
                        float32 store as wide as a real index of the embedded model (1,000 rows x 430,080 in 420 blocks)
  float16 / float32     a smaller store of the same shape in the other types: the measurement behind --fp16-store
                        storing bfloat16 (PyTorch's CPU float16 product runs far below memory bandwidth)
  analyze stages        each stage's share of one `analyze` of a tiny poisoned fine-tune

Each scoring figure is the best of `--reps` passes after one warm-up pass, in a fresh process per store and engine.
On CUDA (`--device cuda`) the stores are generated in GPU memory and the figures compare with both a torch sum over the
same buffer and the card's nominal HBM bandwidth; the index row runs the tiny model and a ~1.1B Llama built from config.
Results go to benchmarks/results/speed-<stamp>.json (or --json)."""
import argparse, json, os, statistics, subprocess, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOMINAL_HBM_GBS = {"H200": 4800, "H100 SXM": 3350, "H100 PCIe": 2000, "H100": 3350, "A100-SXM4-80GB": 2039, "A100 80GB PCIe": 1935,
                   "A100": 1555, "L40S": 864, "L4": 300, "A10": 600, "V100": 900, "T4": 320}


# --- workers (each in its own process) ------------------------------------------------------------------------------------

def _status(field: str) -> int: return next(int(l.split()[1]) * 1024 for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field + ":"))
def _rss_peak() -> int:
    "Peak resident memory of this process (VmHWM: getrusage's ru_maxrss would carry the parent's peak across fork and exec)."
    return _status("VmHWM")


def worker_bandwidth(nbytes: int, reps: int):
    import torch
    buf = torch.ones(nbytes // 4, dtype=torch.float32)
    buf.sum()
    best = min(_timed(buf.sum) for _ in range(reps))
    print("RESULT " + json.dumps(dict(gbs=nbytes / best / 1e9, seconds=best)))


def _timed(f) -> float:
    t0 = time.perf_counter(); f(); return time.perf_counter() - t0


def worker_score(store: str, engine: str, queries: int, reps: int):
    import torch
    from gradian.engines import QueryVectors, make_engine
    from gradian.index.store import GradientIndex
    idx = GradientIndex(store)
    Q = QueryVectors(torch.randn(queries, idx.dim, generator=torch.Generator().manual_seed(1)))
    before = _status("VmRSS")
    if engine == "graddot":
        e = make_engine("graddot").fit(idx); run = lambda: e.score(Q)
    elif engine == "topk":
        e = make_engine("graddot").fit(idx); run = lambda: e.top_k(Q, 100)
    elif engine == "pair":                                                # graddot and datainf alternating in one process: a ratio per round
        e = make_engine("graddot").fit(idx); timed = dict(gd=lambda: e.score(Q), di=lambda: make_engine("datainf").fit(idx).score(Q))
        for f in timed.values(): f()                                      # warm-up
        rounds = []
        for r in range(reps):                                             # who goes first alternates
            t = {k: _timed(timed[k]) for k in (("gd", "di") if r % 2 else ("di", "gd"))}
            rounds.append((t["gd"], t["di"]))
        ratios = sorted(d / g for g, d in rounds)
        print("RESULT " + json.dumps(dict(ratio_median=statistics.median(ratios), ratio_lo=ratios[0], ratio_hi=ratios[-1], rounds=rounds))); return
    else:
        run = lambda: make_engine("datainf").fit(idx).score(Q)            # fit included: it reads the stored per-example terms
    run()                                                                 # warm-up: the store into the page cache
    best = min(_timed(run) for _ in range(reps))
    print("RESULT " + json.dumps(dict(seconds=best, bytes=idx.nbytes(), peak_rss=_rss_peak(), rss_before=before, threads=torch.get_num_threads())))


def worker_gpu_score(gb: float, queries: str, reps: int, dev: str = "cuda"):
    "Scoring a store held in GPU memory, for Q in `queries`, against a torch sum over the same buffer and the nominal HBM bandwidth."
    import torch
    from gradian.index.stream import chunk_dots
    D = 2048
    n = int(gb * 1e9) // (D * 2)
    G = torch.empty(n, D, dtype=torch.bfloat16, device=dev).normal_()
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    def t(f):
        f(); sync(); best = 1e9
        for _ in range(reps):
            sync(); t0 = time.perf_counter(); f(); sync(); best = min(best, time.perf_counter() - t0)
        return best
    ref = G.numel() * 2 / t(lambda: G.sum(dtype=torch.float32)) / 1e9
    rows = []
    for m in map(int, queries.split(",")):
        Q = torch.randn(m, D, device=dev)
        chunk = 1 << 20
        sec = t(lambda: [chunk_dots(G[a:a + chunk], Q) for a in range(0, n, chunk)])
        rows.append(dict(queries=m, gbs=G.numel() * 2 / sec / 1e9, seconds=sec))
    name = torch.cuda.get_device_name() if dev.startswith("cuda") else "cpu (a check of this code path only)"
    nominal = next((v for k, v in NOMINAL_HBM_GBS.items() if k.lower() in name.lower()), None)
    print("RESULT " + json.dumps(dict(device=name, store_gb=G.numel() * 2 / 1e9, sum_gbs=ref, nominal_gbs=nominal, rows=rows)))


def worker_analyze():
    from gradian.analyze import analyze
    from gradian.testing import poisoned_finetune
    with tempfile.TemporaryDirectory() as d:
        d = Path(d); ft = poisoned_finetune(d / "ft")
        (d / "eval.jsonl").write_text("".join(json.dumps({"prompt": it.prompt, "answer": it.answers[0], "metric": it.metric, "capability": it.capability}) + "\n"
                                              for it in ft.items))
        t0 = time.perf_counter()
        a = analyze(ft.model, None, ft.examples, d / "eval.jsonl", d / "report", cfg=ft.cfg, tokenizer=ft.tokenizer, log=None, progress=False)
        total = time.perf_counter() - t0
    print("RESULT " + json.dumps(dict(total=total, stages=a.timings, verdict=a.verdict, peak_rss=_rss_peak())))


# --- orchestrator ----------------------------------------------------------------------------------------------------------

def _run(args: list) -> dict:
    r = subprocess.run([sys.executable, __file__, *map(str, args)], capture_output=True, text=True)
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    if r.returncode or not line: raise SystemExit(f"worker {args} failed:\n{r.stderr[-3000:]}")
    return json.loads(line[-1][7:])


def _index_vs_plain(model: str, n: int, reps: int, device: str) -> dict:
    sys.path.insert(0, str(HERE)); import index_throughput as it
    res = {"index": [], "plain": []}
    for _ in range(reps):                                            # interleaved, as index_throughput does
        for m in res: res[m].append(it.run(["--worker", m, "--model", model, "--n", n, "--batch", 8, "--k", 1024, "--device", device]))
    sec = {m: statistics.median(r["seconds"] for r in rs) for m, rs in res.items()}
    return dict(model=model, n=n, tokens=res["index"][0]["tokens"], index_s=sec["index"], plain_s=sec["plain"], ratio=sec["index"] / sec["plain"])


WIDE_DIM, WIDE_BLOCKS = 430_080, 420      # an index of the embedded model as analyze builds it: 420 LoRA blocks at k=1024, float32

def _stores(a) -> dict:
    from gradian.testing import synthetic_index
    root, small, nb = Path(a.work), max(a.rows // 8, 4096), max(1, a.dim // 1024)      # blocks of the default projection width, k=1024
    wide = 256 if a.quick else 1000
    return {"bfloat16": synthetic_index(root / f"store-{a.rows}x{a.dim}-bfloat16-b{nb}", a.rows, a.dim, "bfloat16", n_blocks=nb),
            "float16": synthetic_index(root / f"store-{small}x{a.dim}-float16-b{nb}", small, a.dim, "float16", n_blocks=nb),
            "float32": synthetic_index(root / f"store-{small}x{a.dim}-float32-b{nb}", small, a.dim, "float32", n_blocks=nb),
            "wide": synthetic_index(root / f"store-{wide}x{WIDE_DIM}-float32-b{WIDE_BLOCKS}", wide, WIDE_DIM, "float32", n_blocks=WIDE_BLOCKS)}


def _huge_share(index) -> float | None:
    "The share of the store's grads files the kernel maps in 2 MB pages (None off Linux): how the page cache holds what scoring reads."
    from gradian.index.read import huge_mapped_share
    shares = [huge_mapped_share(p) for p in sorted((Path(index.path) / "shards").glob("*.grads.npy"))]
    return None if not shares or shares[0] is None else sum(shares) / len(shares)


def table(r: dict) -> str:
    bw, out = r["bandwidth"]["gbs"], []
    row = lambda what, fig, ratio, note="": out.append(f"{what:<30}{fig:>16}  {ratio:<42} {note}")
    row("measure", "figure", "ratio", "notes"); out.append("-" * 140)
    for x in r.get("index", []):
        row(f"index vs plain step ({x['model']})", f"{x['tokens'] / x['index_s']:,.0f} tok/s", f"{x['ratio']:.2f}x the plain step's time",
            f"{x['n']} examples, grad batch 8, k=1024; plain {x['tokens'] / x['plain_s']:,.0f} tok/s")
    row("read bandwidth (torch sum)", f"{bw:.1f} GB/s", "reference", f"in-memory buffer of {r['bandwidth']['bytes'] / 1e9:.2f} GB, {r['threads']} threads")
    for name, s in r["scoring"].items():
        gbs = s["bytes"] / s["seconds"] / 1e9
        extra = f", {s['x_graddot']:.2f}x graddot's time" if "x_graddot" in s else ""
        huge = f", {r['huge_pages']:.0%} in 2 MB pages" if r.get("huge_pages") is not None and name.startswith("graddot, ") and "store" not in name else ""
        row(name, f"{gbs:.1f} GB/s", f"{gbs / bw:.0%} of read bw{extra}",
            f"{s['bytes'] / 1e9:.2f} GB store{huge}, {s['seconds']:.2f} s, peak RSS {s['peak_rss'] / 2**20:,.0f} MB")
    if "paired" in r:
        p = r["paired"]
        row("datainf / graddot, paired", f"{p['ratio_median']:.2f}x", f"median of {len(p['rounds'])} rounds ({p['ratio_lo']:.2f}-{p['ratio_hi']:.2f}x)",
            "both timed in one process, alternating: drift of this machine cancels")
    if "paired_wide" in r:
        p = r["paired_wide"]
        row("  same, real-width store", f"{p['ratio_median']:.2f}x", f"median of {len(p['rounds'])} rounds ({p['ratio_lo']:.2f}-{p['ratio_hi']:.2f}x)",
            f"float32 store {p['shape'][0]:,} x {p['shape'][1]:,} in {p['blocks']} blocks: the embedded model's index, k=1024")
    if "analyze" in r:
        st, tot = r["analyze"]["stages"], r["analyze"]["total"]
        row("analyze (tiny fine-tune)", f"{tot:.1f} s", "stage shares below", f"verdict {r['analyze']['verdict']}, peak RSS {r['analyze']['peak_rss'] / 2**20:,.0f} MB")
        for k, v in sorted(st.items(), key=lambda kv: -kv[1]): row(f"  {k}", f"{v:.2f} s", f"{v / tot:.0%} of analyze")
    for g in r.get("gpu", []):
        row(f"GPU scoring ({g['device']})", f"sum {g['sum_gbs']:,.0f} GB/s", f"nominal {g['nominal_gbs'] or '?'} GB/s", f"{g['store_gb']:.1f} GB bfloat16 store in GPU memory")
        for q in g["rows"]:
            row(f"  graddot, {q['queries']} queries", f"{q['gbs']:,.0f} GB/s", f"{q['gbs'] / g['sum_gbs']:.0%} of sum" + (f", {q['gbs'] / g['nominal_gbs']:.0%} of nominal" if g["nominal_gbs"] else ""))
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 512 MB store, the tiny model once: under 2 minutes")
    ap.add_argument("--rows", type=int, default=None, help="rows of the bfloat16 store (default 1,000,000; --quick 131,072)")
    ap.add_argument("--dim", type=int, default=2048); ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3); ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default=None, help="models for the index row (default tiny; on cuda tiny,1b)")
    ap.add_argument("--gpu-store-gb", type=float, default=16.0); ap.add_argument("--gpu-queries", default="1,8,64,256")
    ap.add_argument("--work", default=str(HERE / "work"), help="where the synthetic stores are kept (reused)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", choices=("bandwidth", "score", "gpu-score", "analyze")); ap.add_argument("--store"); ap.add_argument("--engine")
    ap.add_argument("--bytes", type=int)
    a = ap.parse_args(argv)
    if a.worker == "bandwidth": return worker_bandwidth(a.bytes, a.reps)
    if a.worker == "score": return worker_score(a.store, a.engine, a.queries, a.reps)
    if a.worker == "gpu-score": return worker_gpu_score(a.gpu_store_gb, a.gpu_queries, a.reps, a.device)
    if a.worker == "analyze": return worker_analyze()
    import torch
    a.rows = a.rows or (131_072 if a.quick else 1_000_000)
    cuda = a.device.startswith("cuda")
    models = (a.models or ("tiny,1b" if cuda else "tiny")).split(",")
    t0 = time.perf_counter()
    r = dict(quick=a.quick, rows=a.rows, dim=a.dim, queries=a.queries, threads=torch.get_num_threads(), torch=torch.__version__,
             cpu=next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")), "?")
             if Path("/proc/cpuinfo").exists() else "?")
    r["index"] = [_index_vs_plain(m, 32 if a.quick else 64, 1 if a.quick or m == "1b" else 3, a.device) for m in models]
    stores = _stores(a)
    r["huge_pages"] = _huge_share(stores["bfloat16"])
    r["bandwidth"] = dict(bytes=stores["bfloat16"].nbytes(), **_run(["--worker", "bandwidth", "--bytes", stores["bfloat16"].nbytes(), "--reps", a.reps]))
    sc, big = {}, str(stores["bfloat16"].path)
    sc[f"graddot, {a.queries} queries"] = _run(["--worker", "score", "--store", big, "--engine", "graddot", "--queries", a.queries, "--reps", a.reps])
    sc["graddot top-100"] = _run(["--worker", "score", "--store", big, "--engine", "topk", "--queries", a.queries, "--reps", a.reps])
    sc[f"datainf, {a.queries} queries"] = d = _run(["--worker", "score", "--store", big, "--engine", "datainf", "--queries", a.queries, "--reps", a.reps])
    d["x_graddot"] = d["seconds"] / sc[f"graddot, {a.queries} queries"]["seconds"]
    r["paired"] = _run(["--worker", "score", "--store", big, "--engine", "pair", "--queries", a.queries, "--reps", max(a.reps, 2 if a.quick else 10)])
    w = stores["wide"]
    r["paired_wide"] = dict(shape=[w.n, w.dim], blocks=len(w.blocks), **_run(["--worker", "score", "--store", str(w.path), "--engine", "pair", "--queries", a.queries, "--reps", max(a.reps, 2 if a.quick else 10)]))
    for t in ("float16", "float32"):
        sc[f"graddot, {t} store"] = _run(["--worker", "score", "--store", str(stores[t].path), "--engine", "graddot", "--queries", a.queries, "--reps", a.reps])
    r["scoring"] = sc
    r["analyze"] = _run(["--worker", "analyze"])
    if cuda: r["gpu"] = [_run(["--worker", "gpu-score", "--gpu-store-gb", a.gpu_store_gb, "--gpu-queries", a.gpu_queries, "--reps", a.reps])]
    r["wall_s"] = time.perf_counter() - t0
    print(f"== gradian speed: {r['cpu']}, torch {r['torch']}, {r['threads']} threads; store {a.rows:,} x {a.dim} bfloat16; {a.queries} queries; "
          f"best of {a.reps} after a warm-up; wall {r['wall_s']:.0f} s")
    print(table(r))
    out = Path(a.json) if a.json else HERE / "results" / f"speed-{time.strftime('%Y%m%d-%H%M%S')}{'-quick' if a.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True); out.write_text(json.dumps(r, indent=1) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
