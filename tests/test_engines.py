"""gradian.engines and gradian.query.scorer against direct dense computations on a real (tiny) index:
graddot = explicit dot products, datainf = the per-layer formula written out in float64 (1e-5), l2 = cosine,
per-block scores sum to the total, repsim = cosine difference, rank_correlation on known orders."""
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from gradian.data import Example
from gradian.engines import ENGINES, QueryVectors, make_engine
from gradian.index.build import build_index
from gradian.query.scorer import rank_correlation, score_index


@pytest.fixture(scope="module")
def index(smol_tokenizer, tmp_path_factory):
    from gradian.testing import tiny_lora
    m = tiny_lora(smol_tokenizer, seed=2, targets=("q_proj", "k_proj", "down_proj"))
    exs = [Example(f"e{i}", [{"role": "user", "content": f"Item {i}?"}, {"role": "assistant", "content": "Yes. " * (1 + i % 5)}]) for i in range(30)]
    return build_index(m, smol_tokenizer, exs, tmp_path_factory.mktemp("ix") / "i", projection_dim=96, shard_size=8, grad_batch_size=4)


@pytest.fixture(scope="module")
def Q(index):
    return torch.randn(4, index.dim, generator=torch.Generator().manual_seed(1))


def _layers(blocks, layer):
    keys = [b["module"] if layer == "module" else b["name"] for b in blocks]
    return {k: np.concatenate([np.arange(b["offset"], b["offset"] + b["dim"]) for b, kk in zip(blocks, keys) if kk == k]) for k in dict.fromkeys(keys)}


def datainf_reference(G, Q, blocks, lambda_scale, layer, normalize):
    "The DESIGN.md formula, per layer, dense, float64, one training example at a time."
    if normalize == "l2":
        G = G / np.linalg.norm(G, axis=1, keepdims=True); Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    n, out = G.shape[0], np.zeros((G.shape[0], Q.shape[0]))
    for cols in _layers(blocks, layer).values():
        g = G[:, cols]
        lam = lambda_scale * np.mean([gi @ gi for gi in g])
        for j in range(Q.shape[0]):
            q = Q[j, cols]
            hinv_q = np.zeros_like(q)
            for gi in g: hinv_q += q - (gi @ q) / (lam + gi @ gi) * gi
            out[:, j] += g @ (hinv_q / (n * lam))
    return out


@pytest.mark.parametrize("lambda_scale", [0.1, 0.01, 1.0])
@pytest.mark.parametrize("layer", ["module", "block"])
@pytest.mark.parametrize("normalize", ["none", "l2"])
def test_datainf_equals_dense_formula(index, Q, lambda_scale, layer, normalize):
    G = index.grads().astype(np.float64)
    ours = make_engine("datainf", lambda_scale=lambda_scale, datainf_layer=layer, normalize=normalize).fit(index).score(QueryVectors(Q)).scores
    ref = datainf_reference(G, Q.double().numpy(), index.blocks, lambda_scale, layer, normalize)
    assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("normalize", ["none", "l2"])
def test_datainf_layer_split_by_another_layers_blocks(index, Q, normalize):
    "A layer whose blocks are not adjacent (blocks 0, 2, 4, ... one layer; 1, 3, 5, ... another) still gets one damping and one sum."
    import copy
    ix = copy.copy(index); ix.manifest = dict(index.manifest, blocks=[dict(b, module=f"m{i % 2}") for i, b in enumerate(index.blocks)])
    e = make_engine("datainf", normalize=normalize).fit(ix)
    assert e.shared_layers and e.n_layers == 2
    ref = datainf_reference(ix.grads().astype(np.float64), Q.double().numpy(), ix.blocks, 0.1, "module", normalize)
    assert np.abs(e.score(QueryVectors(Q)).scores - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("m", [8, 20])
def test_datainf_on_a_bfloat16_store_equals_dense_formula(tmp_path, m):
    "A bfloat16 store in chunks of 512 and 276 rows: the weighted sum over 256-row tiles (8 queries) or in one product (20) matches the formula."
    from gradian.testing import synthetic_index
    ix = synthetic_index(tmp_path / "bf", 1300, 8, store_dtype="bfloat16", n_blocks=4, shard_size=512)   # narrow layers: a large correction
    G, Qm = ix.grads().astype(np.float64), torch.randn(m, 8, generator=torch.Generator().manual_seed(4))
    ours = make_engine("datainf", lambda_scale=0.1).fit(ix).score(QueryVectors(Qm)).scores
    ref = datainf_reference(G, Qm.bfloat16().double().numpy(), ix.blocks, 0.1, "module", "none")
    undamped = datainf_reference(G, Qm.bfloat16().double().numpy(), ix.blocks, 1e6, "module", "none") * 1e6 / 0.1   # q / lambda alone
    assert np.abs(ours - ref).max() <= 1e-2 * np.abs(ref).max() < 0.1 * np.abs(undamped - ref).max()   # the correction term is large


def test_datainf_scores_do_not_depend_on_the_workers(index, Q):
    "Chunks run on any of the workers, their sums are added in the store's order: 1 and 3 workers give the same scores, bit for bit."
    threads = torch.get_num_threads()
    try:
        out = []
        for t in (1, 3):
            torch.set_num_threads(t); out.append(make_engine("datainf").fit(index).score(QueryVectors(Q)).scores)
    finally: torch.set_num_threads(threads)
    assert np.array_equal(out[0], out[1])


def test_datainf_flushing_its_float32_sums_changes_nothing(index, Q, monkeypatch):
    "The chunks' float32 sums move into float64 every FLUSH_CHUNKS chunks: after every chunk or once at the end, the same scores."
    import gradian.index.stream as E
    once = make_engine("datainf").fit(index).score(QueryVectors(Q)).scores
    monkeypatch.setattr(E, "FLUSH_CHUNKS", 1)
    every = make_engine("datainf").fit(index).score(QueryVectors(Q)).scores
    assert np.abs(once - every).max() <= 1e-6 * np.abs(once).max()


def test_graddot_equals_explicit_dot_product(index, Q):
    G = index.grads().astype(np.float64)
    r = make_engine("graddot").fit(index).score(QueryVectors(Q), per_block=True)
    ref = G @ Q.double().numpy().T
    assert np.abs(r.scores - ref).max() <= 1e-5 * np.abs(ref).max()
    for b, blk in enumerate(index.blocks):   # each block's own dot product
        sl = slice(blk["offset"], blk["offset"] + blk["dim"])
        assert np.allclose(r.per_block[:, :, b], G[:, sl] @ Q[:, sl].double().numpy().T, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    cos = make_engine("graddot", normalize="l2").fit(index).score(QueryVectors(Q)).scores
    refc = (G / np.linalg.norm(G, axis=1, keepdims=True)) @ (Q.double().numpy() / np.linalg.norm(Q.double().numpy(), axis=1, keepdims=True)).T
    assert np.allclose(cos, refc, atol=1e-6)


def test_datainf_per_block_sums_to_total(index, Q):
    r = make_engine("datainf").fit(index).score(QueryVectors(Q), per_block=True)
    assert np.allclose(r.per_block.sum(2), r.scores, rtol=1e-4, atol=1e-6 * np.abs(r.scores).max())


def test_datainf_large_lambda_approaches_scaled_graddot(index, Q):
    "lambda -> infinity: H^-1 q -> q / lambda_l, so per layer DataInf is graddot divided by that layer's damping."
    d = make_engine("datainf", lambda_scale=1e6, datainf_layer="block").fit(index)
    lam = np.repeat(d.lam, [b["dim"] for b in index.blocks])
    ref = index.grads().astype(np.float64) @ (Q.double().numpy() / lam).T
    assert np.allclose(d.score(QueryVectors(Q)).scores, ref, rtol=1e-4)


def test_repsim_is_a_cosine_difference(index):
    H = index.reps().astype(np.float64)
    pos, neg = torch.from_numpy(H[[3]]).float(), torch.from_numpy(H[[7]]).float()
    s = make_engine("repsim").fit(index).score(QueryVectors(torch.zeros(1, index.dim), reps_pos=pos, reps_neg=neg)).scores[:, 0]
    cos = lambda a, b: (a @ b) / np.linalg.norm(a) / np.linalg.norm(b)
    assert np.allclose(s, [cos(h, H[3]) - cos(h, H[7]) for h in H], atol=1e-5)
    assert s[3] == pytest.approx(1 - cos(H[3], H[7]), abs=1e-5) and s[7] == pytest.approx(cos(H[7], H[3]) - 1, abs=1e-5)


def test_score_index_table_follows_the_sign_convention(index, Q):
    from gradian.query.scorer import InfluenceScores
    r = make_engine("graddot").fit(index).score(QueryVectors(Q[:1]))
    res = InfluenceScores(list(index.ids), r.scores, ["q"], r.params, {}, aux=index.aux()[:, :3])
    with pytest.raises(Exception, match="needs a Query"): score_index(index, QueryVectors(Q[:1]), "graddot")
    t = res.table()
    assert list(t["rank"]) == list(range(1, index.n + 1)) and t["score"].is_monotonic_increasing
    assert np.allclose(t["predicted_loss_delta_if_removed"], t["score"] / index.n)
    assert set(t["id"]) == set(index.ids)


def test_engine_registry_and_errors(index, Q):
    assert set(ENGINES) == {"graddot", "datainf", "repsim", "ekfac"}
    with pytest.raises(Exception, match="not fitted"): make_engine("graddot").score(QueryVectors(Q))
    with pytest.raises(Exception, match="dims"): make_engine("graddot").fit(index).score(QueryVectors(Q[:, :10]))
    with pytest.raises(Exception, match="engine.lambda_scale. must be > 0"): make_engine("datainf", lambda_scale=0)
    with pytest.raises(Exception, match="ekfac"): make_engine("ekfac").fit(index)


def test_rank_correlation_known_orders():
    a = np.arange(10.0)
    assert rank_correlation(a, a) == dict(spearman=1.0, kendall=1.0, top_k_overlap=1.0, k=10)
    r = rank_correlation(a, a[::-1].copy(), k=3)
    assert r["spearman"] == -1.0 and r["kendall"] == -1.0 and r["top_k_overlap"] == 0.0
    b = a.copy(); b[[0, 1]] = b[[1, 0]]                        # one adjacent swap of 10: 1 discordant pair of 45
    r = rank_correlation(a, b, k=3)
    assert abs(r["kendall"] - (1 - 2 / 45)) < 1e-12 and abs(r["spearman"] - (1 - 6 * 2 / (10 * 99))) < 1e-12
    assert r["top_k_overlap"] == 1.0
    c = a.copy(); c[[2, 9]] = c[[9, 2]]                        # the third-most-harmful moves to the end
    assert rank_correlation(a, c, k=3)["top_k_overlap"] == pytest.approx(2 / 3)
    with pytest.raises(Exception, match="cannot compare"): rank_correlation(a, a[:5])
