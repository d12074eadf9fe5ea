"""Determinism: the same inputs give the same index bytes (twice in a process, and in a fresh process); the projection's
fixed-order sum (used on CUDA, where `index_add_` adds atomically in no fixed order) makes exactly the CPU's additions and
repeats its bytes; two `analyze` runs of the embedded model's fine-tune give the same report.json apart from timings."""
import json, os, subprocess, sys

import numpy as np
import pytest
import torch

from gradian.index.build import build_index
from gradian.index.store import GradientIndex, verify_index
from gradian.projection import PROJECTORS, SparseJL
from gradian.testing import assert_same_files

N, SHARD = 40, 8
BUILD = dict(grad_batch_size=4, shard_size=SHARD, max_seq_length=64, projection_dim=32, refs=dict(data="train.jsonl"))


def _files(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tiny(smol_tokenizer):
    from gradian.testing import chat_examples, tiny_lora
    return tiny_lora(smol_tokenizer, seed=1), smol_tokenizer, chat_examples(N)


def test_two_builds_give_the_same_bytes(tiny, tmp_path):
    model, tok, ex = tiny
    a = build_index(model, tok, ex, tmp_path / "a", **BUILD)
    b = build_index(model, tok, ex, tmp_path / "b", **BUILD)
    assert_same_files(a.path, b.path)
    assert len(_files(a.path)) == 2 + 2 * a.n_shards
    m = a.manifest
    assert m["reproducibility"] == dict(device="cpu", bit_reproducible=True, note=m["reproducibility"]["note"])


def test_a_fresh_process_builds_the_same_bytes(tiny, tmp_path):
    """Another interpreter (other hash seed, nothing cached): the same model from the same seeds gives the same index. With the
    same number of threads: a CPU's matrix products split their sums by thread, so another thread count moves the last bits."""
    model, tok, ex = tiny
    build_index(model, tok, ex, tmp_path / "here", **BUILD)
    code = (f"import sys, torch; torch.set_num_threads({torch.get_num_threads()})\n"
            "from gradian.model.core import load_tokenizer\nfrom gradian.testing import chat_examples, tiny_lora\nfrom gradian.index.build import build_index\n"
            "tok = load_tokenizer('embedded')\n"
            f"build_index(tiny_lora(tok, seed=1), tok, chat_examples({N}), sys.argv[1], **{BUILD!r})\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "there")], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert_same_files(tmp_path / "here", tmp_path / "there")


# ---- the projection's fixed-order sum --------------------------------------------------------------------------------

@pytest.mark.parametrize("d,k,s,chunk", [(3000, 64, 1, 1 << 20), (3000, 64, 4, 700), (50_000, 1024, 1, 16_384), (200_000, 16, 2, 65_536), (4608, 1024, 1, 1 << 20)])
def test_ordered_sum_makes_the_cpu_additions(d, k, s, chunk):
    g = torch.randn(6, d, generator=torch.Generator().manual_seed(d + k))
    g[:, ::97] *= 1e4                                                       # wide dynamic range: order matters for the last bits
    p = SparseJL(d, k, s=s, chunk=chunk, name="blk")
    # one level at a time: the same additions as index_add_ on the CPU, in the same order, so the same bits
    a, b = torch.zeros(6, 2 * p.k), torch.zeros(6, 2 * p.k)
    for lo in range(0, d, chunk):
        hi = min(lo + chunk, d)
        for j in range(p.s):
            a.index_add_(1, p._table(lo, hi, j, "cpu"), g[:, lo:hi]); p._ordered_add(b, g[:, lo:hi], lo, hi, j, "cpu", levels=1)
    assert torch.equal(a, b)
    # the default slabs: equal to float rounding, and the same bytes on every call and from a fresh projector
    o = SparseJL(d, k, s=s, chunk=chunk, name="blk", ordered=True)
    ref = p(g)
    out = o(g)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())
    assert out.numpy().tobytes() == o(g).numpy().tobytes() == SparseJL(d, k, s=s, chunk=chunk, name="blk", ordered=True, cache=False)(g).numpy().tobytes()


def test_ordered_sum_runs_under_deterministic_algorithms():
    "The CUDA branch uses only ops that torch.use_deterministic_algorithms(True) allows (sort, searchsorted, index, sum)."
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        g = torch.randn(3, 5000)
        out = SparseJL(5000, 128, s=2, name="x", ordered=True)(g)
    finally:
        torch.use_deterministic_algorithms(was)
    torch.testing.assert_close(out, SparseJL(5000, 128, s=2, name="x")(g), rtol=1e-5, atol=1e-5)


def test_cuda_picks_the_ordered_sum():
    p = SparseJL(100, 8)
    assert p.ordered is None                                                # decided per call: ordered exactly when the input is on CUDA
    calls = []
    p._ordered_add = lambda *a, **kw: calls.append(1)
    class FakeCuda(torch.Tensor):
        @property
        def is_cuda(self): return True
    p(torch.randn(2, 100).as_subclass(FakeCuda))
    assert calls


def test_index_built_with_the_ordered_sum(tiny, tmp_path, monkeypatch):
    "The CUDA path's numbers, on the CPU: the same index to float rounding, and the same bytes build after build."
    model, tok, ex = tiny
    plain = build_index(model, tok, ex, tmp_path / "plain", **BUILD)
    class Ordered(SparseJL):
        def __init__(self, *a, **kw): super().__init__(*a, **{**kw, "ordered": True})
    monkeypatch.setitem(PROJECTORS, "sjlt", Ordered)
    o1 = build_index(model, tok, ex, tmp_path / "o1", **BUILD)
    o2 = build_index(model, tok, ex, tmp_path / "o2", **BUILD)
    assert_same_files(o2.path, o1.path)
    np.testing.assert_allclose(o1.grads(), plain.grads(), rtol=1e-4, atol=1e-6 * np.abs(plain.grads()).max())


# ---- analyze on the embedded model -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_two_analyze_runs_give_the_same_report(tmp_path_factory):
    "The demo's fine-tune of the embedded model (trained once), diagnosed twice: the same report.json apart from timings, the same index bytes."
    from gradian.analyze import analyze
    from gradian.config import load_config
    from gradian.demo import run_demo
    out = tmp_path_factory.mktemp("det") / "capital"
    a, _ = run_demo(out, "capital", log=None, progress=False)
    cfg = load_config(None, ["data.max_seq_length=256"])                   # what run_demo used
    b = analyze("embedded", out / "adapter", out / "data" / "train.jsonl", out / "data" / "eval.jsonl", out / "again", cfg=cfg, log=None, progress=False)
    r1, r2 = (json.loads((d / "report.json").read_text()) for d in (out / "report", out / "again"))
    for r in (r1, r2): r["provenance"].pop("timings")
    assert r1 == r2
    assert_same_files(out / "again" / "index", out / "report" / "index")
    verify_index(out / "again" / "index")
    assert a.verdict == b.verdict
