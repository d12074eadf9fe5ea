#!/usr/bin/env python
"""How faithful are projected influence scores? Spearman of projected vs exact scores on the embedded model.

    python benchmarks/projection_fidelity.py [--n 64] [--queries 8] [--ks 64,256,1024,4096] [--kind sjlt]

Exact per-example gradients of every LoRA block (all seven projection types, r=8) are captured once
on SmolLM2-135M-Instruct; each k then projects them per block with the index's own projectors
(gradian.projection.block_projectors), and each engine scores the same query items in the exact
and in the projected space. Printed: per k and engine, the median (and min) over queries of the
Spearman correlation between projected and exact scores, and the bytes per example."""
import argparse, copy, statistics, sys, time
from pathlib import Path

import numpy as np
import torch

from gradian.engines import QueryVectors, make_engine
from gradian.grads.capture import GradientCapture, iter_batches
from gradian.data import tokenize_examples, Example
from gradian.index.build import build_index
from gradian.model.core import attach_lora, load_model
from gradian.projection import block_projectors
from gradian.query.scorer import rank_correlation
from gradian.scenarios import chat_examples, fact_triples


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=64); ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--ks", default="64,256,1024,4096"); ap.add_argument("--kind", default="sjlt")
    ap.add_argument("--seed", type=int, default=0); ap.add_argument("--s", type=int, default=1, help="sjlt nonzeros per coordinate")
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    base, tok = load_model("embedded")
    model = attach_lora(copy.deepcopy(base), r=8, alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], seed=a.seed).eval()
    train, items = chat_examples(a.n, seed=a.seed), fact_triples(a.queries)
    cap = GradientCapture(model)

    def grads(examples):
        toks = tokenize_examples(examples, tok)
        G = torch.zeros(len(toks), cap.dim)
        for pos, b in iter_batches(toks, 8, tok.pad_token_id): G[pos] = cap(b)[0]
        return G
    t0 = time.perf_counter()
    G = grads(train)
    Q = grads([Example(f"q{i}", [{"role": "user", "content": it[0]}, {"role": "assistant", "content": it[1]}]) for i, it in enumerate(items)]) \
        - grads([Example(f"w{i}", [{"role": "user", "content": it[0]}, {"role": "assistant", "content": it[2]}]) for i, it in enumerate(items)])
    print(f"captured exact gradients: {G.shape[0]} examples x {G.shape[1]} entries in {len(cap.blocks)} blocks ({time.perf_counter() - t0:.0f}s)")

    class MemIndex:       # the engines' view of an index, in memory (exact or projected)
        def __init__(self, G, blocks, dims):
            self.G, self.n, self.dim = G.numpy(), G.shape[0], G.shape[1]
            offs = np.cumsum([0] + dims[:-1]).tolist()
            self.blocks = [dict(name=b.name, module=b.module, dim=d, offset=o) for b, d, o in zip(blocks, dims, offs)]
        def chunks(self): yield 0, torch.from_numpy(self.G)
        def block_sqnorms(self): return np.stack([(self.G[:, b["offset"]:b["offset"] + b["dim"]] ** 2).sum(1) for b in self.blocks], 1)

    def scores(index, Qm, engine):
        return make_engine(engine).fit(index).score(QueryVectors(Qm)).scores
    exact = MemIndex(G, cap.blocks, cap.dims)
    ref = {e: scores(exact, Q, e) for e in ("graddot", "datainf")}
    print(f"{'k':>6} {'engine':>8} {'median rho':>11} {'min rho':>8} {'bytes/example':>14}")
    for k in [int(x) for x in a.ks.split(",")]:
        projs = block_projectors(cap.blocks, k, 0, a.kind, **({"s": a.s} if a.kind == "sjlt" else {}))
        def proj(M): return torch.cat([projs[b.name](M[:, o:o + d]) if b.name in projs else M[:, o:o + d] for b, o, d in zip(cap.blocks, cap.offsets, cap.dims)], 1)
        dims = [projs[b.name].k_out if b.name in projs else b.n_params for b in cap.blocks]
        pidx, Qp = MemIndex(proj(G), cap.blocks, dims), proj(Q)
        for e in ("graddot", "datainf"):
            s = scores(pidx, Qp, e)
            rhos = [rank_correlation(s[:, j], ref[e][:, j])["spearman"] for j in range(Q.shape[0])]
            print(f"{k:>6} {e:>8} {statistics.median(rhos):>11.3f} {min(rhos):>8.3f} {sum(dims) * 4:>14,}")
    print(f"{'exact':>6} {'':>8} {'1.000':>11} {'1.000':>8} {cap.dim * 4:>14,}")


if __name__ == "__main__":
    main()
