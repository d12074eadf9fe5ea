"""`gradian index` under torchrun (gloo on CPU): two processes build the same index as one, shard for shard and byte for byte,
with the same ids and the same scores; a build killed under two processes resumes under one."""
import json, os, signal, socket, subprocess, sys, time
from pathlib import Path

import numpy as np
import pytest
import torch

from gradian.engines import QueryVectors, make_engine
from gradian.index.store import GradientIndex
from gradian.testing import assert_same_files

GRADIAN = str(Path(sys.executable).with_name("gradian"))


def _port() -> int:
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def _index(d, out, nproc=1, popen=False, extra=()):
    model = (d / "model").read_text().strip() if (d / "model").is_file() else str(d / "model")     # a file naming the model: e.g. "embedded"
    args = ["index", "--model", model, "--adapter", str(d / "adapter"), "--data", str(d / "train.jsonl"), "--out", str(out),
            "--no-progress", "--shard-size", "4", "--grad-batch-size", "2", *extra]
    cmd = [GRADIAN, *args] if nproc == 1 else [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                                              "--master_addr", "127.0.0.1", "--master_port", str(_port()), GRADIAN, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if popen: return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r


def _same_index(a:Path, b:Path):
    assert_same_files(a, b, skip=("manifest.json",))          # the manifests differ in build.world_size only: compared below
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    assert {k: v for k, v in ma.items() if k != "build"} == {k: v for k, v in mb.items() if k != "build"}
    ia, ib = GradientIndex(a), GradientIndex(b)
    assert ia.ids == ib.ids
    q = QueryVectors(torch.from_numpy(np.random.default_rng(0).standard_normal((3, ia.dim)).astype(np.float32)), ["a", "b", "c"])
    sa, sb = (make_engine("datainf").fit(i).score(q).scores for i in (ia, ib))
    assert np.array_equal(sa, sb) and np.isfinite(sa).all()
    return ma, mb


def _check_two_ranks(d, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    _index(d, one)
    r = _index(d, two, nproc=2)
    assert "with 2 processes" in r.stdout and not (two / "records").exists()
    ma, mb = _same_index(one, two)
    assert (ma["build"], mb["build"]) == ({"world_size": 1}, {"world_size": 2})
    return one, two


def test_two_processes_build_the_one_process_index(tmp_path, smol_tokenizer):
    from gradian.testing import tiny_model_folders
    d = tiny_model_folders(tmp_path / "tiny", smol_tokenizer, 22)          # 6 shards of 4 (the last of 2): ranks build 3 each
    one, two = _check_two_ranks(d, tmp_path)
    # killed mid-build under two processes, resumed under one: the same index again
    part = tmp_path / "part"
    p = _index(d, part, nproc=2, popen=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list((part / "shards").glob("*.grads.npy")): time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    assert len(list((part / "shards").glob("*.grads.npy"))) < 6          # killed part-way
    _index(d, part)
    _same_index(one, part)


@pytest.mark.slow
def test_two_processes_on_the_embedded_model(tmp_path, smol_path):
    "The acceptance run: the real SmolLM2 with a LoRA adapter, indexed by one process and by two under torchrun."
    from gradian.model.core import attach_lora, load_model
    from gradian.testing import arithmetic_rows
    base, tok = load_model(smol_path)
    d = tmp_path / "embedded"
    attach_lora(base, r=4, target_modules=["q_proj", "v_proj", "down_proj"], seed=1).save_pretrained(d / "adapter")
    (d / "model").write_text("embedded")
    (d / "train.jsonl").write_text("\n".join(json.dumps(r) for r in arithmetic_rows(14)) + "\n")
    _check_two_ranks(d, tmp_path)
