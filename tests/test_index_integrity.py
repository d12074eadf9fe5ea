"""Index integrity: a tampering matrix over a small index (every case refused by `verify_index`, naming the file and
what is wrong; the cases a header, a size or the manifest can reveal refused by plain opening too), resumes that
verify what they reuse, a data path spelled another way, and rows with a non-finite gradient excluded with a finding."""
import json, shutil

import numpy as np
import pytest
import torch

from gradian.core import GradianError
from gradian.testing import assert_same_files
from gradian.index.build import build_index
from gradian.index.read import describe_index, index_findings
from gradian.index.store import GradientIndex, index_problems, manifest_sha256, shard_paths, verify_index

N, SHARD = 40, 8                       # 5 full shards of 8


@pytest.fixture(scope="module")
def tiny(smol_tokenizer):
    from gradian.testing import chat_examples, tiny_lora
    return tiny_lora(smol_tokenizer, seed=1), smol_tokenizer, chat_examples(N)


def _build(tiny, out, **kw):
    model, tok, ex = tiny
    return build_index(model, tok, kw.pop("examples", ex), out, grad_batch_size=4, shard_size=SHARD, max_seq_length=64, projection_dim=32, **kw)


@pytest.fixture(scope="module")
def good(tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("good") / "index"
    _build(tiny, root, refs=dict(data="data/train.jsonl"))
    return root


def _files(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# ---- the tampering matrix -------------------------------------------------------------------------------------------

def _man(d): return json.loads((d / "manifest.json").read_text())
def _put(d, m): (d / "manifest.json").write_text(json.dumps(m, indent=2))
def _edit(d, f): m = _man(d); f(m); _put(d, m)
def _ids(d): return json.loads((d / "ids.json").read_text())
def _put_ids(d, ids): (d / "ids.json").write_text(json.dumps(ids) + "\n")
def _g(d, i): return shard_paths(d, i)[1]
def _a(d, i): return shard_paths(d, i)[0]


def _flip(p, at):
    with open(p, "r+b") as f:
        f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x10]))


def _truncate(p, n):
    with open(p, "r+b") as f: f.truncate(f.seek(0, 2) - n)


def _nan_into(p):
    a = np.load(p, mmap_mode="r+"); a[3, 5] = np.nan; a.flush(); del a


def _as_float16(p):
    np.save(p, np.load(p).astype(np.float16))


def _drop_column(p):
    np.save(p, np.load(p)[:, :-1])


def _resealed(f):
    "An edit that also recomputes manifest_sha256, as a careful hand would: the manifest's own checks must still catch it."
    def go(d):
        m = _man(d); f(m); m["manifest_sha256"] = manifest_sha256(m); _put(d, m)
    return go


def _reorder(d):
    ids = _ids(d); ids[0], ids[1] = ids[1], ids[0]; _put_ids(d, ids)


def _dup(d):
    ids = _ids(d); ids[5] = ids[4]; _put_ids(d, ids)


def _rename_block(m): m["blocks"][0]["module"] += ".x"


def _block_dim(m): m["blocks"][1]["dim"] += 1


# (case, tamper, text the refusal must contain (file and what is wrong), caught by plain opening too)
CASES = [
    ("shard truncated", lambda d: _truncate(_g(d, 2), 100), "shards/00002.grads.npy: ", True),
    ("bytes appended to a shard", lambda d: _g(d, 1).open("ab").write(b"\0" * 16), "shards/00001.grads.npy: ", True),
    ("bit flipped in gradients", lambda d: _flip(_g(d, 3), 400), "shards/00003.grads.npy: its sha256 differs", False),
    ("NaN written into a shard", lambda d: _nan_into(_g(d, 0)), "shards/00000.grads.npy: its sha256 differs", False),
    ("shard deleted", lambda d: _g(d, 3).unlink(), "00003", True),
    ("aux file deleted", lambda d: _a(d, 4).unlink(), "00004", True),
    ("extra shard", lambda d: [shutil.copy(p, p.with_name(p.name.replace("00004", "00005"))) for p in shard_paths(d, 4)],
     "shards/00005.aux.npy: not part of this index", True),
    ("n_shards lowered", lambda d: _edit(d, lambda m: m.update(n_shards=4)), "manifest.json: n_shards is 4, but 40 examples in shards of 8 make 5", True),
    ("n_shards lowered, checksum resealed", _resealed(lambda m: m.update(n_shards=4)), "manifest.json: n_shards is 4", True),
    ("n_shards raised", lambda d: _edit(d, lambda m: m.update(n_shards=6)), "manifest.json: n_shards is 6", True),
    ("ids.json: an id edited", lambda d: _put_ids(d, ["zzz"] + _ids(d)[1:]), "ids.json: its sha256 differs", True),
    ("ids.json reordered", _reorder, "ids.json: its sha256 differs", True),
    ("ids.json truncated", lambda d: _put_ids(d, _ids(d)[:-1]), "ids.json: 39 ids, the manifest says 40 examples", True),
    ("ids.json with a duplicate", _dup, "ids.json: 1 duplicate id (ex4)", True),
    ("ids.json not JSON", lambda d: (d / "ids.json").write_text("[\"ex0\", "), "ids.json: not valid JSON", True),
    ("manifest dim changed", lambda d: _edit(d, lambda m: m.update(dim=m["dim"] + 1)), "manifest.json: dim is", True),
    ("manifest dtype changed", lambda d: _edit(d, lambda m: m.update(store_dtype="float16")), "float32, the manifest says 8 x", True),
    ("shard rewritten as float16", lambda d: _as_float16(_g(d, 1)), "shards/00001.grads.npy: holds 8 x", True),
    ("shard rewritten with a column less", lambda d: _drop_column(_g(d, 2)), "shards/00002.grads.npy: holds 8 x", True),
    ("blocks list: a module renamed", lambda d: _edit(d, _rename_block), "manifest.json: manifest_sha256 does not match", True),
    ("blocks list: a dim changed, resealed", _resealed(_block_dim), "manifest.json: blocks[2] does not start where", True),
    ("fingerprint edited", lambda d: _edit(d, lambda m: m["model"].update(fingerprint="0" * 16)), "manifest_sha256 does not match", True),
    ("checksum field edited", lambda d: _edit(d, lambda m: m["shards"]["00001"]["grads"].update(sha256="0" * 64)),
     "shards/00001.grads.npy: its sha256 differs", False),
    ("recorded size edited", lambda d: _edit(d, lambda m: m["shards"]["00002"]["aux"].update(bytes=12)), "shards/00002.aux.npy: ", True),
    ("shard record deleted", lambda d: _edit(d, lambda m: m["shards"].pop("00002")), "shards/00002.grads.npy: no record of it", True),
    ("aux file tampered", lambda d: _flip(_a(d, 2), 300), "shards/00002.aux.npy: its sha256 differs", False),
    ("shard replaced by another of the same shape", lambda d: shutil.copy(_g(d, 0), _g(d, 1)), "shards/00001.grads.npy: its sha256 differs", False),
    ("manifest deleted", lambda d: (d / "manifest.json").unlink(), "no manifest.json", True),
    ("manifest not JSON", lambda d: (d / "manifest.json").write_text((d / "manifest.json").read_text()[:-40]), "manifest.json: not valid JSON", True),
]


@pytest.mark.parametrize("case,tamper,says,cheap", CASES, ids=[c[0] for c in CASES])
def test_tampered_index_is_refused(good, tmp_path, case, tamper, says, cheap):
    d = tmp_path / "index"; shutil.copytree(good, d)
    verify_index(d)                                               # the copy is sound before the tampering
    tamper(d)
    with pytest.raises(GradianError) as e:
        verify_index(d, checksums=True)
    assert says in str(e.value), str(e.value)
    assert str(d) in str(e.value) and e.value.fix
    if cheap:
        with pytest.raises(GradianError) as e2:
            GradientIndex(d)
        assert says in str(e2.value) or "incomplete" in str(e2.value), str(e2.value)
    else:
        GradientIndex(d)                                          # bytes only a checksum can see: opening passes, verifying does not
        assert index_problems(d, checksums=False) == []
    assert index_problems(d), case


def test_sound_index_verifies_and_describes_itself(good):
    idx = verify_index(good)
    assert index_problems(good) == [] and idx.verified
    m = idx.manifest
    assert sorted(m["shards"]) == [f"{i:05d}" for i in range(5)] and all(r["rows"] == SHARD and r["excluded"] == [] for r in m["shards"].values())
    assert m["manifest_sha256"] == manifest_sha256(m) and len(m["ids_sha256"]) == 64 and m["integrity"]["checksum"] == "sha256"
    txt = describe_index(idx)
    assert "sha256 recorded for 5 of 5 shards (verified)" in txt and "excluded   none" in txt and '"shards"' not in txt


# ---- resumes verify what they reuse ---------------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "bit flip", "checksum edited", "stray shard", "ids.json edited", "record missing"])
def test_resume_rebuilds_what_fails_its_checks(tiny, good, tmp_path, damage, capfd):
    d = tmp_path / "index"; shutil.copytree(good, d)
    {"truncated": lambda: _truncate(_g(d, 2), 100), "bit flip": lambda: _flip(_g(d, 3), 400),
     "checksum edited": lambda: _edit(d, lambda m: m["shards"]["00001"]["grads"].update(sha256="0" * 64)),
     "stray shard": lambda: [shutil.copy(p, p.with_name(p.name.replace("00004", "00009"))) for p in shard_paths(d, 4)],
     "ids.json edited": lambda: _put_ids(d, ["zzz"] + _ids(d)[1:]),
     "record missing": lambda: _edit(d, lambda m: m["shards"].pop("00002"))}[damage]()
    assert index_problems(d)
    _build(tiny, d, refs=dict(data="data/train.jsonl"))
    assert_same_files(good, d)                                    # repaired to the very bytes of the sound build
    err = capfd.readouterr().err
    if damage in ("truncated", "bit flip", "checksum edited", "record missing"): assert "rebuilding shard" in err, err
    if damage == "stray shard": assert "removing shards/00009" in err


def test_killed_between_record_and_rename_resumes(tiny, good, tmp_path):
    "The record is written before the grads file gets its name: a record without its file is an unfinished shard."
    d = tmp_path / "index"; shutil.copytree(good, d)
    _g(d, 4).unlink()
    with pytest.raises(GradianError, match=r"incomplete \(1 of 5 shards missing: 00004\)"):
        GradientIndex(d)
    _build(tiny, d, refs=dict(data="data/train.jsonl"))
    assert_same_files(good, d)


def test_data_path_spelled_another_way_resumes(tiny, good, tmp_path):
    "data.ref (and model/adapter refs) are where an input was read from, not what it holds: the fingerprints decide."
    d = tmp_path / "index"; shutil.copytree(good, d)
    _g(d, 3).unlink(); _g(d, 4).unlink()
    _build(tiny, d, refs=dict(data=str(tmp_path / "elsewhere" / ".." / "data" / "train.jsonl"), model="/abs/model"))
    assert_same_files(good, d)                                    # the first run's refs are kept
    model, tok, ex = tiny                                         # other content under the same path is still refused
    with pytest.raises(GradianError, match="built with other settings .*data"):
        _build(tiny, d, examples=ex[:-1] + [ex[0].__class__("other", ex[-1].messages)], refs=dict(data="data/train.jsonl"))


def test_legacy_index_opens_but_cannot_be_verified(good, tmp_path):
    d = tmp_path / "index"; shutil.copytree(good, d)
    _edit(d, lambda m: [m.pop(k) for k in ("integrity", "shards", "manifest_sha256", "ids_sha256", "reproducibility")])
    idx = GradientIndex(d)                                        # an index built before checksums: opened with the cheap checks
    assert idx.verify(legacy_ok=True) is idx and not idx.verified
    with pytest.raises(GradianError, match="records no checksums"):
        verify_index(d)
    assert [f.check_id for f in index_findings(idx)] == ["index.unverified"]
    _truncate(_g(d, 1), 10)                                       # and the header/size checks still hold for it
    with pytest.raises(GradianError, match="00001.grads.npy"):
        GradientIndex(d)


# ---- non-finite gradients -------------------------------------------------------------------------------------------

def test_nonfinite_rows_are_excluded_with_a_finding(tiny, good, tmp_path, monkeypatch):
    from gradian.grads.capture import GradientCapture
    from gradian.query.scorer import score_index
    real = GradientCapture.__call__
    def poisoned(self, batch, **kw):
        g, l, r = real(self, batch, **kw)
        for row, i in enumerate(batch.ids):
            if i == "ex11": g[row] = float("nan")
            if i == "ex30": g[row, 3] = float("inf")
        return g, l, r
    monkeypatch.setattr(GradientCapture, "__call__", poisoned)
    idx = _build(tiny, tmp_path / "nan", refs=dict(data="data/train.jsonl"))
    monkeypatch.undo()
    assert idx.excluded == ["ex11", "ex30"] and idx.manifest["shards"]["00001"]["excluded"] == ["ex11"]
    G, clean = idx.grads(), GradientIndex(good).grads()
    assert np.isfinite(G).all() and not G[[11, 30]].any()
    keep = np.setdiff1d(np.arange(N), [11, 30])
    assert np.array_equal(G[keep], clean[keep])                  # every other row exactly as in a clean build
    assert not idx.block_sqnorms()[[11, 30]].any()
    f = index_findings(GradientIndex(idx.path))
    assert [(x.check_id, x.severity, x.example_ids) for x in f] == [("index.nonfinite_gradient", "warning", ["ex11", "ex30"])]
    assert "ex11" in describe_index(idx) and verify_index(idx.path)
    # scored 0 under every engine, named in the scores' engine record
    from gradian.data import EvalItem
    from gradian.query.signals import build_query
    model, tok, ex = tiny
    q = build_query(model, tok, [EvalItem("q1", "Name 3?", ["It is number 3."])], idx)
    for eng, kw in (("graddot", {}), ("graddot", dict(normalize="l2")), ("datainf", {}), ("datainf", dict(normalize="l2")), ("repsim", {})):
        s = score_index(GradientIndex(idx.path), q, eng, **kw)
        assert np.isfinite(s.scores).all() and not s.scores[[11, 30]].any() and s.engine["excluded"] == ["ex11", "ex30"], (eng, kw)
        assert s.scores[keep].any()


# ---- gradian show-index ---------------------------------------------------------------------------------------------

CHEAP = [c for c in CASES if c[3]]


@pytest.mark.parametrize("case,tamper,says,cheap", CHEAP, ids=[c[0] for c in CHEAP])
def test_show_index_refuses_a_damaged_index(good, tmp_path, capsys, case, tamper, says, cheap):
    "show-index opens the index, and opening checks every header, size and the manifest: exit 2, the file and the fault named."
    from gradian.cli import main
    d = tmp_path / "index"; shutil.copytree(good, d); tamper(d)
    assert main(["show-index", str(d)]) == 2
    err = capsys.readouterr().err
    assert (says in err or "incomplete" in err) and "Traceback" not in err, err


def _has_verify_flag() -> bool:
    from gradian.cli import build_parser
    try: build_parser().parse_args(["show-index", "x", "--verify"]); return True
    except SystemExit: return False


def test_show_index_verify_hashes_the_shards(good, tmp_path, capsys):
    from gradian.cli import main
    if not _has_verify_flag(): pytest.skip("`gradian show-index --verify` is not wired in nbs/38_cli.ipynb yet (it is to call gradian.index.store.verify_index)")
    assert main(["show-index", str(good), "--verify"]) == 0 and "(verified)" in capsys.readouterr().out
    d = tmp_path / "index"; shutil.copytree(good, d); _flip(_g(d, 3), 400)
    assert main(["show-index", str(d)]) == 0                        # a flipped bit passes every cheap check ...
    capsys.readouterr()
    assert main(["show-index", str(d), "--verify"]) == 2            # ... and not the checksum
    err = capsys.readouterr().err
    assert "shards/00003.grads.npy: its sha256 differs" in err and "Traceback" not in err, err
