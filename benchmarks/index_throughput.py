#!/usr/bin/env python
"""Index-building throughput against a plain LoRA training step and a one-example-at-a-time loop.

    python benchmarks/index_throughput.py [--model embedded|tiny|both] [--n 64] [--batch 8] [--reps 3] [--k 1024]

Three ways through the same examples, cut into the same batches (length-sorted, left-padded):

- index:  gradian.index.build.build_index: forward + backward + per-example gradients of every LoRA
          block + projection + writing shards (the capture-and-write phase is timed; fingerprints
          and tokenization are reported apart as setup);
- plain:  a plain LoRA forward+backward (weights' .grad, summed over the batch) with the same
          per-example-normalised loss, no per-example gradients, nothing written;
- loop:   one example per forward+backward (autograd .grad of the LoRA weights), projected with
          the same maps: what per-example gradients cost without batching.

Each (mode, repetition) runs in a fresh worker process, repetitions interleaved across modes, and
the medians are printed with their ratios.

Peak memory comes from one more run of each mode, made for memory alone: the highest anonymous
resident memory (resident minus file-backed pages, sampled every millisecond) during the timed
part, minus its size just before it. That run pins glibc's mmap threshold
(MALLOC_MMAP_THRESHOLD_=131072): with the default, dynamic threshold, freed activation buffers stay
in the heap, so the resident size only shows growth beyond whatever the warm-up happened to
leave behind (it varied 90-500 MB between identical runs); pinned, every large buffer is returned
when freed and the peak is the live memory of the step. Pinning slows allocation, so that run is
not timed. The whole resident set's peak is printed beside it. Then: bytes per
example on disk against n_blocks x k x itemsize, and the stored vectors against the single-example
autograd gradient projected with the same map, at grad batch sizes 1, 8 and 32."""
import argparse, copy, json, statistics, subprocess, sys, tempfile, threading, time
from pathlib import Path

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# --- worker side ---------------------------------------------------------------------------------

def _mem() -> tuple[int, int]:
    "(anonymous resident bytes, total resident bytes) of this process, from /proc/self/statm (resident - shared = anonymous)."
    with open("/proc/self/statm") as f: _, res, shared = map(int, f.read().split()[:3])
    return (res - shared) * 4096, res * 4096

class PeakRSS:
    "Samples memory every millisecond in a thread; .extra = peak anonymous resident minus its size at start, .extra_rss the same for the whole RSS."
    def __enter__(self):
        self.base = self.peak = _mem(); self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True); self._t.start(); return self
    def _sample(self):
        a, r = _mem(); self.peak = (max(self.peak[0], a), max(self.peak[1], r))
    def _run(self):
        while not self._stop: self._sample(); time.sleep(0.001)
    def __exit__(self, *a):
        self._stop = True; self._t.join(); self._sample()
        self.extra, self.extra_rss = self.peak[0] - self.base[0], self.peak[1] - self.base[1]


def load(model_name, seed=0, device="cpu"):
    "The embedded SmolLM2, the tiny Llama, or `1b`: a ~1.1B Llama (TinyLlama's shape) built from its config, no weights downloaded."
    from gradian.model.core import attach_lora, load_model, load_tokenizer
    if model_name == "embedded":
        base, tok = load_model("embedded")
    else:
        from gradian.testing import tiny_llama
        tok = load_tokenizer("embedded")
        size = (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2) if model_name == "tiny" else
                dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4))
        base = tiny_llama(tok, seed=seed, max_position_embeddings=2048, tie_word_embeddings=True, **size)
    return attach_lora(base, r=8, alpha=16, target_modules=TARGETS, seed=seed).to(device).eval(), tok


def worker(mode, model_name, n, batch, k, device="cpu"):
    import numpy as np, torch
    from gradian.scenarios import chat_examples
    from gradian.data import tokenize_examples
    from gradian.grads.capture import iter_batches, supervised_losses
    from gradian.index.build import build_index
    from gradian.index.store import auto_shard_size
    from gradian.model.core import lora_blocks
    from gradian.projection import block_projectors
    model, tok = load(model_name, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    examples = chat_examples(n)
    toks = tokenize_examples(examples, tok)
    n_tokens = sum(len(t.input_ids) for t in toks)
    blocks = lora_blocks(model)
    projs = block_projectors(blocks, k, 0, "sjlt")
    params = [model.get_submodule(b.path).weight for b in blocks]
    out = {}
    if mode == "index":
        with tempfile.TemporaryDirectory() as d:
            build_index(model, tok, examples[:batch], Path(d) / "warm", grad_batch_size=batch, projection_dim=k)   # warm-up
            with PeakRSS() as mem:
                idx = build_index(model, tok, examples, Path(d) / "idx", grad_batch_size=batch, projection_dim=k, shard_size=n)
            t = idx.build_timings
            out = dict(seconds=t["capture_and_write_s"], setup_s=t["setup_s"], tokens=t["tokens"], peak_extra=mem.extra, peak_rss=mem.extra_rss,
                       bytes=idx.nbytes(), n_blocks=len(idx.blocks), dim=idx.dim, n=idx.n)
    elif mode == "plain":
        for p in params: p.requires_grad_(True)
        batches = [b.to(device) for _, b in iter_batches(toks, batch, tok.pad_token_id)]
        def step(b):
            losses, _ = supervised_losses(model, b)
            losses.sum().backward()
            for p in params: p.grad = None
        step(batches[0])                                   # warm-up
        with PeakRSS() as mem:
            t0 = time.perf_counter()
            for b in batches: step(b)
            sync(); sec = time.perf_counter() - t0
        out = dict(seconds=sec, tokens=n_tokens, peak_extra=mem.extra, peak_rss=mem.extra_rss)
    elif mode == "loop":
        for p in params: p.requires_grad_(True)
        singles = [b for _, b in iter_batches(toks, 1, tok.pad_token_id, sort_by_length=False)]
        D = sum(projs[b.name].k_out if b.name in projs else b.n_params for b in blocks)
        def one(b, row):
            losses, _ = supervised_losses(model, b)
            gs = torch.autograd.grad(losses[0], params)
            o = 0
            for blk, g in zip(blocks, gs):
                v = g.flatten()[None]; v = projs[blk.name](v) if blk.name in projs else v
                row[o:o + v.shape[1]] = v[0]; o += v.shape[1]
        one(singles[0], torch.zeros(D))                    # warm-up
        G = np.zeros((len(singles), D), dtype=np.float32)
        with PeakRSS() as mem:
            t0 = time.perf_counter()
            for i, b in enumerate(singles):
                row = torch.zeros(D); one(b, row); G[i] = row.numpy()
            sec = time.perf_counter() - t0
        out = dict(seconds=sec, tokens=n_tokens, peak_extra=mem.extra, peak_rss=mem.extra_rss)
    print("RESULT " + json.dumps(out))


def accuracy(model_name, k, sizes=(1, 8, 32), n=32):
    "Max relative L2 error of stored rows vs the projected single-example autograd gradient, per grad batch size."
    import numpy as np, torch
    from gradian.scenarios import chat_examples
    from gradian.data import tokenize_examples
    from gradian.testing import reference_per_example_grads
    from gradian.index.build import build_index
    from gradian.model.core import lora_blocks
    from gradian.projection import block_projectors
    model, tok = load(model_name)
    examples = chat_examples(n, seed=7)
    blocks = lora_blocks(model)
    ref = reference_per_example_grads(model, tokenize_examples(examples, tok), blocks)
    projs = block_projectors(blocks, k, 0, "sjlt")
    offs = [0]
    for b in blocks: offs.append(offs[-1] + b.n_params)
    refp = torch.cat([projs[b.name](ref[:, o:o + b.n_params]) if b.name in projs else ref[:, o:o + b.n_params] for b, o in zip(blocks, offs)], 1).numpy()
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for bs in sizes:
            G = build_index(model, tok, examples, Path(d) / f"b{bs}", grad_batch_size=bs, projection_dim=k).grads()
            res[bs] = float((np.linalg.norm(G - refp, axis=1) / np.linalg.norm(refp, axis=1)).max())
    print("RESULT " + json.dumps(res))


# --- orchestrator ----------------------------------------------------------------------------------

MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}

def run(args, env=None):
    import os
    r = subprocess.run([sys.executable, __file__, *map(str, args)], capture_output=True, text=True, env={**os.environ, **(env or {})})
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    if r.returncode or not line: raise SystemExit(f"worker {args} failed:\n{r.stderr[-3000:]}")
    return json.loads(line[-1][7:])


def bench(model_name, n, batch, reps, k):
    res = {m: [] for m in ("index", "plain", "loop")}
    for rep in range(reps):                     # interleaved: index, plain, loop, index, plain, loop, ...
        for m in res: res[m].append(run(["--worker", m, "--model", model_name, "--n", n, "--batch", batch, "--k", k]))
    med = {m: {"seconds": statistics.median(r["seconds"] for r in rs)} for m, rs in res.items()}
    for m in med:                               # one untimed run per mode for peak memory (see the module docstring)
        r = run(["--worker", m, "--model", model_name, "--n", n, "--batch", batch, "--k", k], env=MEMORY_ENV)
        med[m].update(peak_extra=r["peak_extra"], peak_rss=r["peak_rss"])
    tokens = res["index"][0]["tokens"]
    tps = {m: tokens / med[m]["seconds"] for m in med}
    ix = res["index"][0]
    print(f"\n== {model_name}: {n} examples, {tokens} tokens, grad batch {batch}, k={k}, {ix['n_blocks']} LoRA blocks, {reps} interleaved reps (medians)")
    print(f"{'mode':<8}{'tokens/s':>12}{'seconds':>10}{'peak MB':>10}{'(all RSS)':>11}   (peak: live memory of the step, from the memory run)")
    for m in med: print(f"{m:<8}{tps[m]:>12.0f}{med[m]['seconds']:>10.2f}{med[m]['peak_extra'] / 2**20:>10.1f}{med[m]['peak_rss'] / 2**20:>11.1f}")
    print(f"index setup (fingerprints, manifest, tokenization), not in the rate: {statistics.median(r['setup_s'] for r in res['index']):.2f}s")
    print(f"throughput index/plain = {tps['index'] / tps['plain']:.2f}   index/loop = {tps['index'] / tps['loop']:.2f}   plain/loop = {tps['plain'] / tps['loop']:.2f}")
    print(f"peak memory index/plain = {med['index']['peak_extra'] / max(med['plain']['peak_extra'], 1):.2f} (anonymous), "
          f"{med['index']['peak_rss'] / max(med['plain']['peak_rss'], 1):.2f} (all resident pages)")
    per_ex, expect = ix["bytes"] / ix["n"], ix["dim"] * 4
    print(f"bytes per example on disk {per_ex:,.0f} vs n_blocks x k x 4 = {ix['n_blocks']} x {k} x 4 = {ix['n_blocks'] * k * 4:,} "
          f"(stored dims {ix['dim']}: blocks smaller than k stay exact); off by {abs(per_ex - expect) / expect:.3%} from dims x 4")
    acc = run(["--accuracy", "--model", model_name, "--k", k])
    print("stored vs single-example autograd (projected with the same map), max relative L2 over 32 examples: "
          + ", ".join(f"batch {b}: {e:.1e}" for b, e in acc.items()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="both", choices=("embedded", "tiny", "1b", "both"))
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the 1b model is meant for cuda)")
    ap.add_argument("--n", type=int, default=64); ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3); ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--worker", choices=("index", "plain", "loop")); ap.add_argument("--accuracy", action="store_true")
    a = ap.parse_args(argv)
    if a.worker: return worker(a.worker, a.model, a.n, a.batch, a.k, a.device)
    if a.accuracy: return accuracy(a.model, a.k)
    import torch
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for m in (["tiny", "embedded"] if a.model == "both" else [a.model]): bench(m, a.n, a.batch, a.reps, a.k)


if __name__ == "__main__":
    main()
