"""gradian.projection: same bytes across processes, memory that does not grow with the block, the JL error scale."""
import hashlib, json, math, subprocess, sys, textwrap

import pytest
import torch

from gradian.projection import PROJECTORS, block_projectors, make_projector


def _py(code):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("kind", list(PROJECTORS))
def test_same_seed_same_bytes_across_processes(kind):
    code = f"""
        import hashlib, torch
        from gradian.projection import make_projector
        x = torch.randn(3, 20000, generator=torch.Generator().manual_seed(5))
        y = make_projector({kind!r}, 20000, 512, seed=11, name="model.layers.3.mlp.down_proj.lora_A")(x)
        print(hashlib.sha256(y.numpy().tobytes()).hexdigest())
    """
    assert _py(code) == _py(code)


def test_peak_memory_of_a_ten_million_entry_block():
    "k=1024 over d=10^7: a dense k x d float32 matrix would be 41 GB; the sparse map must stay near the input's size."
    out = _py("""
        import resource, json, torch
        from gradian.projection import make_projector
        d, k = 10_000_000, 1024
        g = torch.randn(2, d)                                  # 80 MB input
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        p = make_projector("sjlt", d, k, seed=0, name="huge", cache=False)
        y = p(g)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps([(peak - base) * 1024, list(y.shape), bool(torch.isfinite(y).all())]))
    """)
    extra, shape, finite = json.loads(out)
    assert shape == [2, 1024] and finite
    assert extra < 600e6, f"projection used {extra / 1e6:.0f} MB above the input"     # vs 41e9 for a dense matrix


def test_dense_kinds_bounded_by_chunk_when_cache_is_off():
    out = _py("""
        import resource, json, torch
        from gradian.projection import make_projector
        d, k = 2_000_000, 256                                 # dense: 2 GB as one matrix
        g = torch.randn(2, d)
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        y = make_projector("rademacher", d, k, seed=0, name="big", chunk=8192, cache_bytes=0)(g)
        print(json.dumps([(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024, list(y.shape)]))
    """)
    extra, shape = json.loads(out)
    assert shape == [2, 256] and extra < 300e6, extra


@pytest.mark.parametrize("kind", list(PROJECTORS))
def test_jl_error_scale_k1024(kind):
    g = torch.Generator().manual_seed(0)
    d, k, n = 12288, 1024, 300
    a = torch.randn(n, d, generator=g); b = a * 0.3 + torch.randn(n, d, generator=g)
    P = make_projector(kind, d, k, seed=3, name="x")
    err = ((P(a) * P(b)).sum(1) - (a * b).sum(1)).abs() / (a.norm(dim=1) * b.norm(dim=1))
    cos2 = ((a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))) ** 2
    expected_mean = (math.sqrt(2 / math.pi) * torch.sqrt((1 + cos2) / k)).mean()     # E|N(0, (1+cos^2)/k)|
    assert err.mean() < 1.3 * expected_mean, (err.mean(), expected_mean)


def test_block_projectors_skip_small_blocks():
    class B:
        def __init__(self, name, n): self.name, self.n_params = name, n
    ps = block_projectors([B("a", 100), B("b", 5000)], 1024)
    assert set(ps) == {"b"} and ps["b"].k_out == 1024
    assert block_projectors([B("a", 100)], None) == {}
    with pytest.raises(Exception, match="unknown projection kind"):
        make_projector("fft", 10, 5)
