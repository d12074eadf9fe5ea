"""Faults while indexing: SIGKILL at random points of a build (in a forked child that kills itself at its k-th write, fsync or
rename; and of the `gradian index` command at random times) and of `analyze` building its index; a full disk; a read-only
folder. Each killed run, rerun, ends byte-identical to an uninterrupted one; a write error is a clear GradianError that leaves
the completed shards and the manifest intact and no file that looks complete."""
import copy, errno, json, os, random, signal, subprocess, sys, tempfile, time
from pathlib import Path

import numpy as np
import pytest
import torch

from gradian.core import GradianError
from gradian.testing import assert_same_files
from gradian.index.build import build_index
from gradian.index.store import GradientIndex, index_problems, verify_index

GRADIAN = str(Path(sys.executable).with_name("gradian"))
N, SHARD = 40, 8


def _files(d: Path) -> dict:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(Path(d).rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def one_thread():
    "Forked children must not inherit a busy intra-op thread pool."
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny(smol_tokenizer, one_thread):
    from gradian.testing import chat_examples, tiny_lora
    return tiny_lora(smol_tokenizer, seed=1), smol_tokenizer, chat_examples(N)


def _build(tiny, out, **kw):
    model, tok, ex = tiny
    return build_index(model, tok, ex, out, grad_batch_size=4, shard_size=SHARD, max_seq_length=64, projection_dim=32, refs=dict(data="train.jsonl"), **kw)


@pytest.fixture(scope="module")
def baseline(tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("base") / "index"
    _build(tiny, root)
    return root


# ---- SIGKILL at the k-th write event of a forked build ---------------------------------------------------------------

EVENTS = ("pwrite", "fsync", "replace")


def _count_events(fn) -> int:
    n, real = [0], {e: getattr(os, e) for e in EVENTS}
    def hook(e):
        def f(*a, **kw): n[0] += 1; return real[e](*a, **kw)
        return f
    try:
        for e in EVENTS: setattr(os, e, hook(e))
        fn()
    finally:
        for e in EVENTS: setattr(os, e, real[e])
    return n[0]


def _killed_at(fn, k: int, timeout: float = 300) -> int:
    "Run `fn` in a forked child that SIGKILLs itself just before its k-th pwrite/fsync/rename; returns the signal that ended it."
    pid = os.fork()
    if pid == 0:                                                    # the child: never returns into pytest
        try:
            n = [0]; real = {e: getattr(os, e) for e in EVENTS}
            def hook(e):
                def f(*a, **kw):
                    n[0] += 1
                    if n[0] == k: os.kill(os.getpid(), signal.SIGKILL)
                    return real[e](*a, **kw)
                return f
            for e in EVENTS: setattr(os, e, hook(e))
            fn()
        except BaseException:
            os._exit(3)
        os._exit(0)
    t0 = time.time()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done: break
        if time.time() - t0 > timeout: os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0); pytest.fail(f"child killed at event {k} hung")
        time.sleep(0.02)
    assert os.WIFSIGNALED(status), f"the child ran to the end (exit {os.waitstatus_to_exitcode(status)}) instead of dying at event {k}"
    return os.WTERMSIG(status)


def _state(out: Path) -> str:
    "What opening a killed build's folder says: a killed build is never 'damaged', only unfinished."
    try: GradientIndex(out); return "complete"
    except GradianError as e:
        msg = str(e)
        assert "damaged" not in msg, msg
        return "incomplete" if "incomplete" in msg else "no manifest" if "no manifest" in msg else msg


def _kill_points(n_events: int, k: int, seed: int) -> list:
    return sorted(random.Random(seed).sample(range(1, n_events + 1), k))


def _index_kill_check(tiny, baseline, tmp_path, points):
    n = _count_events(lambda: _build(tiny, tmp_path / "count"))
    seen = []
    for k in _kill_points(n, points, seed=14):
        out = tmp_path / f"k{k}"
        assert _killed_at(lambda: _build(tiny, out), k) == signal.SIGKILL
        seen.append(_state(out) if out.exists() else "nothing")
        _build(tiny, out)                                           # the rerun: resumes
        assert_same_files(baseline, out, note=f"killed at event {k} of {n}: the resumed index differs")
        verify_index(out)
    return n, seen


def test_sigkill_at_random_writes_resumes_byte_identical(tiny, baseline, tmp_path):
    n, seen = _index_kill_check(tiny, baseline, tmp_path, 3)
    assert n > 50 and len(seen) == 3


@pytest.mark.slow
def test_sigkill_at_20_random_writes_resumes_byte_identical(tiny, baseline, tmp_path):
    n, seen = _index_kill_check(tiny, baseline, tmp_path, 20)
    print(f"{n} write events; states after the kills: {seen}")
    assert "incomplete" in seen


def test_stale_temp_files_of_a_killed_first_write_do_not_block(tiny, baseline, tmp_path):
    "A build killed while writing its very first manifest leaves only a temp file: the rerun starts cleanly."
    out = tmp_path / "index"; out.mkdir()
    (out / ".manifest.json.abc123.tmp").write_text("{half")
    _build(tiny, out)
    assert_same_files(baseline, out)


# ---- analyze, killed while building (or after) its index, rerun --------------------------------------------------------

@pytest.fixture(scope="module")
def finetune(tmp_path_factory, one_thread):
    from gradian.testing import poisoned_finetune
    root = tmp_path_factory.mktemp("ft")
    ft = poisoned_finetune(root / "ft")
    ev = root / "eval.jsonl"
    ev.write_text("".join(json.dumps({"prompt": it.prompt, "answer": it.answers[0], "metric": it.metric, "capability": it.capability}) + "\n" for it in ft.items))
    from gradian.config import set_key
    cfg = copy.deepcopy(ft.cfg); set_key(cfg, "index.shard_size", 8); set_key(cfg, "index.grad_batch_size", 4)
    return ft, ev, cfg


def _analyze(finetune, out):
    from gradian.analyze import analyze
    ft, ev, cfg = finetune
    return analyze(ft.model, None, ft.examples, ev, out, cfg=cfg, tokenizer=ft.tokenizer, log=None, progress=False)


def _report_minus_timings(out: Path) -> dict:
    rep = json.loads((out / "report.json").read_text())
    rep["provenance"].pop("timings")
    return rep


def _analyze_kill_check(finetune, tmp_path, points):
    base = tmp_path / "base"
    n = _count_events(lambda: _analyze(finetune, base))
    assert (base / "index" / "manifest.json").exists(), "the fixture must gate, so that analyze builds an index"
    for k in _kill_points(n, points, seed=17):
        out = tmp_path / f"k{k}"
        assert _killed_at(lambda: _analyze(finetune, out), k) == signal.SIGKILL
        _analyze(finetune, out)                                     # the rerun reuses (resumes) the partial index
        assert _report_minus_timings(out) == _report_minus_timings(base), f"killed at event {k} of {n}"
        for sub in [p.relative_to(base) for p in base.rglob("manifest.json") if p.parent.name != base.name]:
            assert_same_files(base / sub.parent, out / sub.parent, note=f"killed at event {k} of {n}: {sub.parent} differs")
    return n


@pytest.mark.slow
def test_analyze_killed_at_20_random_points(finetune, tmp_path):
    n = _analyze_kill_check(finetune, tmp_path, 20)
    print(f"analyze: {n} write events")


# ---- a full disk, a read-only folder ------------------------------------------------------------------------------------

def _no_litter(out: Path):
    "No temp file left, and no shard file that looks complete without passing its checks."
    assert not [p for p in out.rglob(".*.tmp")], [p.name for p in out.rglob(".*.tmp")]
    m = json.loads((out / "manifest.json").read_text())
    for g in (out / "shards").glob("*.grads.npy"):
        assert g.name[:5] in m["shards"]
    assert all(p == "shards: " or p.startswith("shards: ") for p in index_problems(out)), index_problems(out)


def _fail_on(monkeypatch, name: str, after: int, err=errno.ENOSPC):
    "Make os.<name> (or a gradian.core/index write helper) raise `err` from its `after`-th call on."
    import gradian.core, gradian.index.build
    owner = os if hasattr(os, name) else gradian.index.build
    real, n = getattr(owner, name), [0]
    def f(*a, **kw):
        n[0] += 1
        if n[0] > after: raise OSError(err, os.strerror(err))
        return real(*a, **kw)
    monkeypatch.setattr(owner, name, f)


@pytest.mark.parametrize("where,after", [("pwrite", 20), ("fsync", 5), ("write_json", 2), ("replace", 6)])
def test_full_disk_is_a_clear_error_and_keeps_what_was_done(tiny, baseline, tmp_path, monkeypatch, where, after):
    out = tmp_path / "index"
    _fail_on(monkeypatch, where, after)
    with pytest.raises(GradianError) as e:
        _build(tiny, out)
    monkeypatch.undo()
    msg = str(e.value)
    assert "No space left on device (ENOSPC)" in msg and "could not write" in msg and "run the same command again" in msg, msg
    assert (out / "manifest.json").exists() and _state(out) == "incomplete"
    _no_litter(out)
    done = json.loads((out / "manifest.json").read_text())["shards"]
    for k in done:                                                  # what was completed is intact: the very bytes of the full build
        for f in (f"shards/{k}.grads.npy", f"shards/{k}.aux.npy"):
            assert (out / f).read_bytes() == (baseline / f).read_bytes()
    _build(tiny, out)                                               # space freed: the rerun finishes the same index
    assert_same_files(baseline, out)


def test_full_disk_while_resuming_leaves_the_partial_index_intact(tiny, baseline, tmp_path, monkeypatch):
    out = tmp_path / "index"
    import shutil; shutil.copytree(baseline, out)
    for k in ("00003", "00004"): (out / "shards" / f"{k}.grads.npy").unlink()
    before = _files(out)
    _fail_on(monkeypatch, "pwrite", 0)
    with pytest.raises(GradianError, match="shard 00003 .*No space left"):
        _build(tiny, out)
    monkeypatch.undo()
    after = _files(out)
    assert {k: v for k, v in after.items() if "00003" not in k} == {k: v for k, v in before.items() if "00003" not in k}
    _no_litter(out)


def _make_read_only(out: Path, monkeypatch) -> str:
    """chmod 0o555 where that blocks writes; as root it does not (root ignores the mode), so there every temp file
    gradian would create in `out` is refused with EACCES instead, which is what a read-only folder does."""
    os.chmod(out, 0o555)
    if (out / "shards").exists(): os.chmod(out / "shards", 0o555)
    probe = out / ".probe"
    try: probe.write_text("x"); probe.unlink()
    except PermissionError: return "chmod"
    import tempfile as tf
    real = tf.mkstemp
    def mkstemp(*a, dir=None, **kw):
        if dir is not None and Path(dir).resolve().is_relative_to(out.resolve()): raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(*a, dir=dir, **kw)
    monkeypatch.setattr(tf, "mkstemp", mkstemp)
    return "monkeypatch"


def test_read_only_folder(tiny, baseline, tmp_path, monkeypatch):
    import shutil
    # an empty read-only folder: refused before anything is written
    empty = tmp_path / "empty"; empty.mkdir()
    how = _make_read_only(empty, monkeypatch)
    with pytest.raises(GradianError, match="could not write the index folder .*Permission denied") as e:
        _build(tiny, empty)
    assert "writable" in e.value.fix
    assert not (empty / "manifest.json").exists() and not list(empty.rglob("*.npy"))
    monkeypatch.undo(); os.chmod(empty, 0o755)
    # a partial index in a read-only folder: refused at the first shard to write, the rest intact
    part = tmp_path / "part"; shutil.copytree(baseline, part)
    (part / "shards" / "00004.grads.npy").unlink(); before = _files(part)
    _make_read_only(part, monkeypatch)
    with pytest.raises(GradianError, match="shard 00004 .*Permission denied"):
        _build(tiny, part)
    monkeypatch.undo(); os.chmod(part, 0o755); os.chmod(part / "shards", 0o755)
    assert {k: v for k, v in _files(part).items() if "00004" not in k} == {k: v for k, v in before.items() if "00004" not in k}
    # a complete index in a read-only folder: rerunning the build verifies it and writes nothing
    full = tmp_path / "full"; shutil.copytree(baseline, full)
    _make_read_only(full, monkeypatch)
    assert _build(tiny, full).n == N
    monkeypatch.undo(); os.chmod(full, 0o755); os.chmod(full / "shards", 0o755)
    assert_same_files(baseline, full)
    print(f"read-only folder simulated by {how}")


# ---- the command line ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory, smol_tokenizer):
    "A tiny random Llama (with the SmolLM2 tokenizer) saved as a model folder, a LoRA adapter folder, and chat data."
    from gradian.testing import tiny_model_folders
    return tiny_model_folders(tmp_path_factory.mktemp("tinycli"), smol_tokenizer, 600, data="data/train.jsonl")


def _cli(d, out, data="data/train.jsonl", cwd=None, popen=False, **kw):
    cmd = [GRADIAN, "index", "--model", str(d / "model"), "--adapter", str(d / "adapter"), "--data", str(data), "--out", str(out),
           "--no-progress", "--shard-size", "16", "--grad-batch-size", "8", "--projection-dim", "64"]
    if popen: return subprocess.Popen(cmd, cwd=cwd or d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=cwd or d, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def cli_full(tiny_dirs):
    full = tiny_dirs / "full"
    t0 = time.time(); r = _cli(tiny_dirs, full); wall = time.time() - t0
    assert r.returncode == 0, r.stderr
    return full, wall


@pytest.mark.slow
def test_cli_resume_with_the_data_path_spelled_another_way(tiny_dirs, cli_full, tmp_path):
    "Relative path, absolute path, a symlink: the same content resumes (and keeps the first run's ref)."
    full, _ = cli_full
    part = tmp_path / "part"
    p = _cli(tiny_dirs, part, popen=True)
    while p.poll() is None and len(list((part / "shards").glob("*.grads.npy"))) < 2: time.sleep(0.01)
    p.send_signal(signal.SIGKILL); p.wait()
    (tmp_path / "link.jsonl").symlink_to(tiny_dirs / "data" / "train.jsonl")
    r = _cli(tiny_dirs, part, data=tmp_path / "link.jsonl")
    assert r.returncode == 0, r.stderr
    assert_same_files(full, part)
    r = _cli(tiny_dirs, part, data=Path("./data/../data/train.jsonl"))    # complete already: verified, nothing rewritten
    assert r.returncode == 0, r.stderr
    assert_same_files(full, part)


@pytest.mark.slow
def test_cli_sigkill_at_20_random_times(tiny_dirs, cli_full, tmp_path):
    states = _cli_kill_check(tiny_dirs, cli_full, tmp_path, 20)
    print("after the kills:", states)


def _cli_kill_check(tiny_dirs, cli_full, tmp_path, points):
    "Kill `gradian index` at random times between its start of writing and its end; the rerun must give the full index's bytes."
    full, wall = cli_full
    rng, states = random.Random(14), []
    for j in range(points):
        out = tmp_path / f"k{j}"
        p = _cli(tiny_dirs, out, popen=True)
        while p.poll() is None and not (out / "manifest.json").exists(): time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.6) * wall * 0.5)                 # the writing takes under half of a run (the rest is start-up)
        p.send_signal(signal.SIGKILL); p.wait()
        states.append(_state(out) if out.exists() else "nothing")
        r = _cli(tiny_dirs, out)
        assert r.returncode == 0, r.stderr
        assert_same_files(full, out, note=f"kill {j} ({states[-1]}): the resumed index differs")
    return states


def _start_check(tiny, baseline, tmp_path, ks):
    for k in ks:
        out = tmp_path / f"k{k}"
        assert _killed_at(lambda: _build(tiny, out), k) == signal.SIGKILL
        state = _state(out) if out.exists() else "nothing"
        assert state in ("nothing", "no manifest", "incomplete"), (k, state)
        _build(tiny, out)
        assert_same_files(baseline, out, note=f"killed at event {k}")


def test_killed_at_the_start_resumes(tiny, baseline, tmp_path):
    "Killed with ids.json in place and no manifest yet (event 3: the manifest's fsync), and with the manifest in place and no shard (event 5)."
    _start_check(tiny, baseline, tmp_path, [3, 5])


@pytest.mark.slow
def test_killed_at_every_step_of_the_start(tiny, baseline, tmp_path):
    "The first writes (ids.json, the manifest, the first rows and files) are where a kill could leave a folder that refuses to resume: each of them."
    _start_check(tiny, baseline, tmp_path, range(1, 15))
