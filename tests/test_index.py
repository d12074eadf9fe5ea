"""gradian index / show-index as a user runs them, on a tiny random Llama saved to disk with a real PEFT adapter folder:
--fp16-store (bfloat16) halves the store, an older float16 index still scores, --module-filter keeps only those blocks, a killed build resumes byte-identically,
mismatched settings are refused with the field names."""
import copy, json, os, signal, subprocess, sys, time
from pathlib import Path

import numpy as np
import pytest
import torch

from gradian.index.build import check_query_manifest, query_manifest, make_capture
from gradian.index.store import GradientIndex, manifest_projection
from gradian.testing import assert_same_files

GRADIAN = str(Path(sys.executable).with_name("gradian"))


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory, smol_tokenizer):
    "A tiny random Llama (with the SmolLM2 tokenizer) saved as a model folder, a LoRA adapter folder, and chat data."
    from gradian.testing import tiny_model_folders
    root = tiny_model_folders(tmp_path_factory.mktemp("tiny"), smol_tokenizer, 1200)
    (root / "small.jsonl").write_text("\n".join((root / "train.jsonl").read_text().splitlines()[:40]) + "\n")
    return root


def _index(d, out, *extra, data="small.jsonl", check=True):
    r = subprocess.run([GRADIAN, "index", "--model", d / "model", "--adapter", d / "adapter", "--data", d / data, "--out", out,
                        "--no-progress", *map(str, extra)], capture_output=True, text=True, timeout=600)
    if check: assert r.returncode == 0, r.stderr
    return r


def _files(d: Path) -> dict:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_fp16_store_is_half_the_bytes(tiny_dirs, tmp_path):
    a = GradientIndex(_index(tiny_dirs, tmp_path / "f32", "--projection-dim", "none") and tmp_path / "f32")
    b = GradientIndex(_index(tiny_dirs, tmp_path / "f16", "--projection-dim", "none", "--fp16-store") and tmp_path / "f16")
    assert a.manifest["store_dtype"] == "float32" and b.manifest["store_dtype"] == "bfloat16"
    header = 128 * a.n_shards                                   # .npy headers are 128 bytes each
    assert (b.nbytes() - header) * 2 == a.nbytes() - header
    assert np.allclose(b.grads(), a.grads(), rtol=1e-2, atol=1e-3 * np.abs(a.grads()).max())


def test_float16_index_of_an_older_gradian_still_scores_but_is_not_reused(tiny_dirs, tmp_path):
    "Before bfloat16 was the half type, fp16_store wrote float16: such an index opens, verifies and scores, and a build asking for fp16_store rebuilds."
    from gradian.index.read import index_settings
    from gradian.index.store import file_record, manifest_sha256, verify_index
    from gradian.engines import QueryVectors, make_engine
    from gradian.core import GradianError
    new, old = tmp_path / "f32", tmp_path / "old"
    _index(tiny_dirs, new, "--projection-dim", "none"); _index(tiny_dirs, old, "--projection-dim", "none")
    m = json.loads((old / "manifest.json").read_text())
    for i in range(m["n_shards"]):                              # what an older gradian's --fp16-store wrote
        p = old / "shards" / f"{i:05d}.grads.npy"; np.save(p, np.load(p).astype(np.float16))
        m["shards"][f"{i:05d}"]["grads"] = file_record(p)
    m["store_dtype"], m["settings"]["index"]["fp16_store"] = "float16", True
    m["manifest_sha256"] = manifest_sha256(m); (old / "manifest.json").write_text(json.dumps(m))
    o, n = verify_index(old), GradientIndex(new)
    q = QueryVectors(torch.randn(2, n.dim, generator=torch.Generator().manual_seed(0)))
    for eng in ("graddot", "datainf"):
        so, sn = (make_engine(eng).fit(i).score(q).scores for i in (o, n))
        assert np.abs(so - sn).max() < 1e-2 * np.abs(sn).max()
    with pytest.raises(GradianError, match=r"stored type\) is 'float16' there, 'bfloat16' requested"):
        o.require_settings(index_settings(fp16_store=True, projection_dim=None), m["max_seq_length"])


def test_module_filter_and_show_index(tiny_dirs, tmp_path):
    _index(tiny_dirs, tmp_path / "dp", "--module-filter", "down_proj", "--projection-dim", 64)
    idx = GradientIndex(tmp_path / "dp")
    assert {b["module"].split(".")[-1] for b in idx.blocks} == {"down_proj"} and len(idx.blocks) == 4
    assert idx.manifest["module_filter"] == "down_proj"
    out = subprocess.run([GRADIAN, "show-index", tmp_path / "dp"], capture_output=True, text=True, check=True).stdout
    assert "model.layers.*.mlp.down_proj.lora_A" in out and "model.layers.*.mlp.down_proj.lora_B" in out
    assert "q_proj" not in out.split("manifest:")[0] and "module filter: down_proj" in out
    assert f"{idx.n} in {idx.n_shards} shards" in out and "float32" in out
    js = json.loads(subprocess.run([GRADIAN, "show-index", tmp_path / "dp", "--json"], capture_output=True, text=True, check=True).stdout)
    assert js == idx.manifest
    # every down_proj block (A: 4x48, B: 32x4) is larger than k=64, so the store is n x 4 blocks x 64 x 4 bytes (+ .npy headers)
    assert all(b["dim"] == 64 for b in idx.blocks)
    expected = idx.n * 4 * 64 * 4
    assert idx.nbytes() >= expected and (idx.nbytes() - expected) / expected < 0.01


def test_filter_matching_nothing_is_a_clear_error(tiny_dirs, tmp_path):
    r = _index(tiny_dirs, tmp_path / "x", "--module-filter", "gate_proj", check=False)
    assert r.returncode == 2 and "matches none of the" in r.stderr and "down_proj" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow          # a minute; by default tests/test_faults.py kills builds at random write events and checks the same bytes
def test_killed_build_resumes_byte_identical(tiny_dirs, tmp_path):
    full = tmp_path / "full"
    _index(tiny_dirs, full, "--shard-size", 16, "--grad-batch-size", 8, data="train.jsonl")
    part = tmp_path / "part"
    p = subprocess.Popen([GRADIAN, "index", "--model", tiny_dirs / "model", "--adapter", tiny_dirs / "adapter", "--data",
                          tiny_dirs / "train.jsonl", "--out", part, "--no-progress", "--shard-size", "16", "--grad-batch-size", "8"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and len(list((part / "shards").glob("*.grads.npy"))) < 3 and p.poll() is None: time.sleep(0.01)
    p.send_signal(signal.SIGKILL); p.wait()
    n_done = len(list((part / "shards").glob("*.grads.npy")))
    n_total = json.loads((full / "manifest.json").read_text())["n_shards"]
    assert 3 <= n_done < n_total, f"the kill did not land mid-build ({n_done} of {n_total} shards)"
    with pytest.raises(Exception, match="incomplete"):
        GradientIndex(part)
    _index(tiny_dirs, part, "--shard-size", 16, "--grad-batch-size", 8, data="train.jsonl")
    assert_same_files(full, part)


def test_other_settings_refuse_to_resume_and_name_the_fields(tiny_dirs, tmp_path):
    _index(tiny_dirs, tmp_path / "i", "--projection-dim", 64)
    r = _index(tiny_dirs, tmp_path / "i", "--projection-dim", 32, "--fp16-store", check=False)
    assert r.returncode == 2 and "built with other settings" in r.stderr
    for f in ("projection", "store_dtype", "blocks"): assert f in r.stderr
    assert _index(tiny_dirs, tmp_path / "i", "--projection-dim", 32, "--overwrite").returncode == 0
    assert GradientIndex(tmp_path / "i").manifest["projection_dim"] == 32


def test_query_from_mismatched_manifest_is_refused(tiny_dirs, tmp_path):
    from gradian.model.core import load_model
    _index(tiny_dirs, tmp_path / "i", "--projection-dim", 64)
    idx = GradientIndex(tmp_path / "i")
    model, tok = load_model(tiny_dirs / "model", adapter=tiny_dirs / "adapter")
    cap = make_capture(idx, model, tok)
    good = query_manifest(model, tok, cap, None, manifest_projection(idx.manifest))
    check_query_manifest(idx, good)
    bad = {**good, "projection_seed": 7, "adapter": {"fingerprint": "0000"}}
    with pytest.raises(Exception) as e:
        check_query_manifest(idx, bad)
    assert "adapter.fingerprint" in str(e.value) and "projection_seed" in str(e.value) and "model.fingerprint" not in str(e.value).split("):")[0]


def test_an_index_from_before_the_projection_rename_still_reads(tiny_dirs, tmp_path):
    "Manifests written before the projection fields took the config's names kept them in a `projection` section."
    import json
    from gradian.index.store import manifest_sha256
    from gradian.model.core import load_model
    _index(tiny_dirs, tmp_path / "i", "--projection-dim", 64, "--projection-seed", 5)
    m = json.loads((tmp_path / "i" / "manifest.json").read_text())
    m["projection"] = dict(dim=m.pop("projection_dim"), seed=m.pop("projection_seed"), kind=m.pop("projection_kind"))
    m["manifest_sha256"] = manifest_sha256(m)
    (tmp_path / "i" / "manifest.json").write_text(json.dumps(m))
    old = GradientIndex(tmp_path / "i")
    assert manifest_projection(old.manifest) == dict(projection_dim=64, projection_seed=5, projection_kind="sjlt")
    model, tok = load_model(tiny_dirs / "model", adapter=tiny_dirs / "adapter")
    q = query_manifest(model, tok, make_capture(old, model, tok), None, manifest_projection(old.manifest))
    check_query_manifest(old, q)                                       # the same projection: accepted
    with pytest.raises(Exception, match="projection_seed"):
        check_query_manifest(old, {**q, "projection_seed": 0})
