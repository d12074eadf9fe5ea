"""Issue 14: every bad input a user reported, as a user hands it over (real files, `gradian.cli.main`, the console
script for the exit code), must end in one clear message (file, line, field or config key, and a fix) and exit
code 2, never a traceback; and what is right but was refused (a UTF-8 BOM, a HF datasets folder) must load."""
import json, os, re, subprocess, sys
from dataclasses import fields
from pathlib import Path

import pytest

from gradian.checks import check_data
from gradian.cli import main
from gradian.config import GradianConfig, _hints, apply_overrides, check_key, config_from_dict, load_config, range_text
from gradian.core import DataError, GradianError
from gradian.data import iter_train, load_eval, load_train

GRADIAN = str(Path(sys.executable).with_name("gradian"))
GOOD = [{"prompt": f"What is {a} plus {b}?", "completion": f"{a + b}."} for a, b in [(1, 2), (3, 4), (5, 6)]]
EVAL = [{"prompt": "Capital of France?", "answer": "Paris"}, {"prompt": "2+2?", "answers": ["4", "four"]}]


def _lines(rows):
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)


def _file(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _cli(capsys, *argv):
    "`gradian <argv>` in process: (exit code, stdout, stderr); argparse usage errors are SystemExit(2)."
    try: rc = main([str(a) for a in argv])
    except SystemExit as e: rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _user_error(rc, err, *expected):
    assert rc == 2, err
    assert "Traceback" not in err
    for s in expected: assert s in err, (s, err)


# ---------------------------------------------------------------- training data through `gradian check`

BAD_TRAIN = {  # name: (file bytes, what stderr must say besides the path)
    "latin1": (_lines(GOOD[:1]) + '{"prompt": "Caf\u00e9?", "completion": "Oui."}\n'.encode("latin-1"),
               ":2: the file is not UTF-8: byte 0xe9 at column 16"),
    "utf16": ('{"prompt": "q", "completion": "a"}\n'.encode("utf-16"), ":1: the file is not UTF-8: it holds NUL bytes or a UTF-16"),
    "utf16le_no_bom": (_lines(GOOD[:2]) + '{"prompt": "q", "completion": "a"}\n'.encode("utf-16-le"), ":3: the file is not UTF-8"),
    "raw_surrogate": (_lines(GOOD[:1]) + b'{"prompt": "q", "completion": "a\xed\xa0\x80"}\n', ":2: the file is not UTF-8: byte 0xed"),
    "escaped_surrogate": (_lines(GOOD[:2]) + b'{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a\\ud800"}]}\n',
                          ":3: field 'messages[1].content': a lone surrogate"),
    "deep_json": (_lines(GOOD[:1]) + b"[" * 200_000 + b"]" * 200_000 + b"\n", ":2: invalid JSON: nested too deeply"),
    "deep_but_parsable": (_lines(GOOD[:1]) + b'{"prompt": "q", "completion": "a", "meta": ' + b"[" * 500 + b"]" * 500 + b"}\n",
                          ":2: field 'meta"),
    "id_object": (_lines(GOOD[:1] + [{**GOOD[1], "id": {"n": 1}}]), ":2: field 'id': id must be a non-empty string or an integer, got {'n': 1} (dict)"),
    "id_list": (_lines(GOOD[:2] + [{**GOOD[2], "id": [1, 2]}]), ":3: field 'id': id must be a non-empty string or an integer"),
    "id_empty": (_lines([{**GOOD[0], "id": ""}]), ":1: field 'id': id must be a non-empty string or an integer, got ''"),
    "id_bool": (_lines([{**GOOD[0], "id": True}]), ":1: field 'id'"),
    "huge_int": (_lines(GOOD[:1]) + b'{"id": ' + b"7" * 5000 + b', "prompt": "q", "completion": "a"}\n', ":2: invalid JSON"),
}


@pytest.mark.parametrize("name", list(BAD_TRAIN))
def test_bad_training_file_is_one_clear_error(tmp_path, capsys, name):
    data, expected = BAD_TRAIN[name]
    f = _file(tmp_path, "train.jsonl", data)
    rc, out, err = _cli(capsys, "check", "--data", f)
    _user_error(rc, err, f"gradian check: error: {f}{expected}", "fix:")
    with pytest.raises(DataError) as ei: load_train(f)       # the library raises the same, located
    assert str(ei.value).startswith(f"{f}{expected.split(' ', 1)[0]}")


def test_encoding_fix_says_resave_as_utf8(tmp_path, capsys):
    for name in ("latin1", "utf16"):
        f = _file(tmp_path, f"{name}.jsonl", BAD_TRAIN[name][0])
        assert "fix: re-save the file as UTF-8" in _cli(capsys, "check", "--data", f)[2]


def test_utf8_bom_and_crlf_are_accepted(tmp_path, capsys):
    f = _file(tmp_path, "bom.jsonl", b"\xef\xbb\xbf" + _lines(GOOD).replace(b"\n", b"\r\n"))
    assert [e.id for e in load_train(f)] == ["row-1", "row-2", "row-3"]
    rc, out, err = _cli(capsys, "check", "--data", f, "--model", "none", "--json")
    assert rc == 0, err
    assert [d["check_id"] for d in json.loads(out)] == ["checks.skipped"]


@pytest.mark.parametrize("data", [b"", b"\n\n", b"   \n\t\n  ", b"\xef\xbb\xbf\n"])
def test_empty_training_file_is_an_error(tmp_path, capsys, data):
    f = _file(tmp_path, "train.jsonl", data)
    with pytest.raises(DataError, match="no training rows: the file is empty or holds only blank lines"): load_train(f)
    rc, out, err = _cli(capsys, "check", "--data", f, "--json")
    assert rc == 1 and [(d["check_id"], d["severity"]) for d in json.loads(out)] == [("data.no_examples", "error")]
    assert _cli(capsys, "check", "--data", f, "--fail-on", "never")[0] == 0
    rc, out, _ = _cli(capsys, "check", "--data", f)
    assert "ERROR   data.no_examples" in out and "no findings" not in out


def test_control_tokens_are_reported_by_check(tmp_path, capsys, smol_tokenizer):
    rows = GOOD + [{"id": "leak", "prompt": "Say hi", "completion": "Hi!<|im_end|>\n<|im_start|>user\nMore"},
                   {"id": "special", "prompt": "Which file?", "completion": "Open <jupyter_code> now."}]
    f = _file(tmp_path, "train.jsonl", _lines(rows))
    rc, out, err = _cli(capsys, "check", "--data", f, "--model", "none", "--json")    # without a model: the chat markers
    found = {d["check_id"]: d for d in json.loads(out)}
    assert rc == 1 and found["data.control_tokens_in_content"]["example_ids"] == ["leak"]
    assert found["data.control_tokens_in_content"]["severity"] == "error"
    fs = {x.check_id: x for x in check_data(f, smol_tokenizer, max_seq_length=512)}    # with its tokenizer: every special token
    ct = fs["data.control_tokens_in_content"]
    assert ct.example_ids == ["leak", "special"] and ct.details["tokens"] == ["<jupyter_code>", "<|im_end|>", "<|im_start|>"]
    assert smol_tokenizer("<jupyter_code>", add_special_tokens=False)["input_ids"] == [smol_tokenizer.convert_tokens_to_ids("<jupyter_code>")]


def test_hf_datasets_folder(tmp_path, capsys):
    from datasets import Dataset, DatasetDict
    DatasetDict({"train": Dataset.from_list(GOOD), "dev": Dataset.from_list(GOOD[:1] * 2)}).save_to_disk(str(tmp_path / "dd"))
    Dataset.from_list(GOOD[:2]).save_to_disk(str(tmp_path / "ds"))
    assert [e.id for e in load_train(tmp_path / "ds")] == ["row-0", "row-1"]
    assert len(load_train(tmp_path / "dd")) == 3 and len(load_train(tmp_path / "dd", split="dev")) == 2
    rc, out, err = _cli(capsys, "check", "--data", tmp_path / "dd", "--model", "none", "data.split=dev", "--json")
    assert rc == 0, err
    assert {d["check_id"] for d in json.loads(out)} == {"checks.skipped", "data.duplicate_examples"}
    _user_error(*_cli(capsys, "check", "--data", tmp_path / "dd", "data.split=test")[::2], "has splits ['train', 'dev']; which one?", "data.split=")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "train.jsonl").write_bytes(_lines(GOOD))
    _user_error(*_cli(capsys, "check", "--data", tmp_path / "plain")[::2], "is a folder but not a HF datasets folder", "save_to_disk")


def test_loader_streams(tmp_path):
    "iter_train hands out rows as it reads them: the first example arrives before a broken later line is read."
    f = _file(tmp_path, "train.jsonl", _lines(GOOD[:2]) + b"{broken\n")
    it = iter_train(f)
    assert next(it).id == "row-1" and next(it).id == "row-2"
    with pytest.raises(DataError, match=":3: invalid JSON"): next(it)


# ---------------------------------------------------------------- eval data

@pytest.mark.parametrize("data, expected", [
    ('{"prompt": "Caf\u00e9?", "answer": "y"}\n'.encode("cp1252"), ":1: the file is not UTF-8: byte 0xe9"),
    ('{"prompt": "q", "answer": "y"}\n'.encode("utf-16"), ":1: the file is not UTF-8"),
    (_lines(EVAL) + b'{"prompt": "q\\udfff", "answer": "y"}\n', ":3: field 'prompt': a lone surrogate"),
    (_lines(EVAL) + b"{" * 50_000 + b"\n", ":3: invalid JSON"),
    (_lines(EVAL + [{"id": {"a": 1}, "prompt": "q", "answer": "y"}]), ":3: field 'id': id must be a non-empty string or an integer"),
    (_lines(EVAL + [{"prompt": "q", "answer": "y", "capability": ["geo"]}]), ":3: field 'capability': capability must be a non-empty string"),
    (b"\n  \n", ": no eval items"),
])
def test_bad_eval_file(tmp_path, data, expected):
    f = _file(tmp_path, "eval.jsonl", data)
    with pytest.raises(DataError) as ei: load_eval(f)
    assert str(ei.value).startswith(f"{f}{expected}"), str(ei.value)
    assert "\n  fix: " in str(ei.value)


def test_eval_bom_accepted(tmp_path):
    f = _file(tmp_path, "eval.jsonl", b"\xef\xbb\xbf" + _lines(EVAL))
    assert [(i.id, i.answers) for i in load_eval(f)] == [("row-1", ["Paris"]), ("row-2", ["4", "four"])]


# ---------------------------------------------------------------- config: file, overrides, ranges, unknown keys

def test_non_utf8_config_file(tmp_path, capsys):
    train = _file(tmp_path, "train.jsonl", _lines(GOOD))
    cfg = _file(tmp_path, "gradian.yaml", "engine:\n  name: graddot\n  # r\u00e9sum\u00e9 of the run\n".encode("latin-1"))
    _user_error(*_cli(capsys, "check", "--data", train, "--config", cfg)[::2], f"{cfg}:3: the file is not UTF-8", "re-save the file as UTF-8")
    cfg.write_bytes(b"\xef\xbb\xbfengine:\n  name: graddot\n")
    assert load_config(cfg).engine.name == "graddot"                                   # a BOM is fine


@pytest.mark.parametrize("yaml_text, expected", [
    ("engine:\n  name:\n    x: 1\n", "config key 'engine.name' expects str"),
    ("engine:\n  lambda_scale: 0.1\n  damping: 2\n", "unknown config key 'engine.damping'"),
    ("tokenizer:\n  chat_template: '{{ x }}'\n", "unknown config key 'tokenizer'"),
    ("index:\n  - shard_size\n", "config section 'index' must be a mapping"),
    ("- 1\n- 2\n", "config section '<root>' must be a mapping"),
    ("evaluation:\n  confidence: .nan\n", "'evaluation.confidence' must be a finite number, got nan"),
    ("training:\n  seed: 2024-02-30\n", "invalid YAML"),
    ("[" * 5000, "invalid YAML"),
])
def test_bad_config_file(tmp_path, yaml_text, expected):
    p = _file(tmp_path, "gradian.yaml", yaml_text.encode())
    with pytest.raises(GradianError, match=re.escape(expected)): load_config(p)


def test_unknown_key_lists_the_known_keys():
    with pytest.raises(GradianError) as ei: config_from_dict({"cluster": {"acuse_z": 3}})
    assert ei.value.fix == "valid keys under 'cluster': " + ", ".join(f.name for f in fields(_hints(GradianConfig)["cluster"]))


@pytest.mark.parametrize("override, expected", [
    ("engine.name.x=1", "'engine.name' is a setting, not a section, so 'engine.name.x' does not exist"),
    ("engine.lambda_scale=nan", "config key 'engine.lambda_scale' must be a finite number, got nan"),
    ("engine.lambda_scale=-1", "config key 'engine.lambda_scale' must be > 0, got -1.0"),
    ("evaluation.confidence=1.5", "config key 'evaluation.confidence' must be in (0, 1), got 1.5"),
    ("evaluation.n_bootstrap=0", "config key 'evaluation.n_bootstrap' must be >= 1, got 0"),
    ("report.top_k=-1", "config key 'report.top_k' must be >= 1, got -1"),
    ("index.shard_size=-1", "config key 'index.shard_size' must be >= 1, got -1"),
    ("data.max_seq_length=-5", "config key 'data.max_seq_length' must be >= 1, got -5"),
    ("training.lr=inf", "config key 'training.lr' must be a finite number, got inf"),
    ("index.module_filter=down_proj[", "config key 'index.module_filter' is not a valid regular expression"),
    ("data.split=", "config key 'data.split' expects str, got None"),
    ("training.target_modules=[]", "config key 'training.target_modules' expects a non-empty list of names"),
    ("tokenizer.chat_template=x", "unknown config section 'tokenizer'"),
])
def test_bad_override_through_the_cli(tmp_path, capsys, override, expected):
    train = _file(tmp_path, "train.jsonl", _lines(GOOD))
    _user_error(*_cli(capsys, "check", "--data", train, override)[::2], f"gradian check: error: {expected}")


def _settings():
    "(dotted key, field, type) of every setting."
    for s in fields(GradianConfig):
        sec = _hints(GradianConfig)[s.name]
        for f in fields(sec): yield f"{s.name}.{f.name}", f, _hints(sec)[f.name]


def test_every_float_setting_refuses_nan_and_inf():
    floats = [k for k, f, tp in _settings() if float in (tp, *getattr(tp, "__args__", ()))]
    assert {"engine.lambda_scale", "evaluation.confidence", "training.lr", "index.path_scale"} <= set(floats)
    for k in floats:
        for bad in (float("nan"), float("inf"), float("-inf")):
            with pytest.raises(GradianError, match=re.escape(f"config key '{k}' must be a finite number")): check_key(k, bad)


def test_every_range_is_enforced_at_its_bounds():
    "Each declared bound accepts its edge (ge/le) and refuses the value just past it, naming key, value and range."
    ranged = [(k, f, tp) for k, f, tp in _settings() if f.metadata.get("range")]
    assert {"index.grad_batch_size", "index.shard_size", "report.top_k", "evaluation.n_bootstrap"} <= {k for k, _, _ in ranged}
    for k, f, tp in ranged:
        rng, is_int = f.metadata["range"], int in (tp, *getattr(tp, "__args__", ()))
        step, num = (1, int) if is_int else (1e-9, float)
        for op, edge in rng.items():
            inside, outside = {"ge": (edge, edge - step), "gt": (edge + step, edge), "le": (edge, edge + step), "lt": (edge - step, edge)}[op]
            inside, outside = num(inside), num(outside)
            check_key(k, inside)
            with pytest.raises(GradianError) as ei: check_key(k, outside)
            assert f"config key '{k}' must be {range_text(rng)}, got {outside}" in str(ei.value), str(ei.value)


def test_defaults_are_valid_and_round_trip():
    from gradian.config import config_to_dict
    cfg = load_config()
    assert config_from_dict(json.loads(json.dumps(config_to_dict(cfg)))) == cfg


# ---------------------------------------------------------------- CLI numbers

@pytest.mark.parametrize("argv, expected", [
    (["index", "--grad-batch-size", "0"], "argument --grad-batch-size: config key 'index.grad_batch_size' must be >= 1, got 0"),
    (["index", "--shard-size", "-1"], "argument --shard-size: config key 'index.shard_size' must be >= 1, got -1"),
    (["check", "--max-seq-length", "-5"], "argument --max-seq-length: config key 'data.max_seq_length' must be >= 1, got -5"),
    (["analyze", "--projection-dim", "0"], "argument --projection-dim: config key 'index.projection_dim' must be >= 1, got 0"),
    (["train", "--lr", "nan"], "argument --lr: config key 'training.lr' must be a finite number, got nan"),
    (["train", "--epochs", "-1"], "argument --epochs: config key 'training.epochs' must be > 0, got -1.0"),
    (["train", "--r", "four"], "argument --r: config key 'training.r' expects int, got 'four'"),
    (["demo", "--seed", "-3"], "argument --seed: config key 'training.seed' must be in [0, 4294967295], got -3"),
])
def test_bad_number_flags(capsys, argv, expected):
    rc, out, err = _cli(capsys, *argv)
    _user_error(rc, err, f"gradian {argv[0]}: error: {expected}")


def test_console_script_exit_codes(tmp_path):
    "The real `gradian` executable: exit 2 and one message, no traceback, for a bad file, a bad flag and a bad override."
    bad = _file(tmp_path, "train.jsonl", BAD_TRAIN["latin1"][0])
    good = _file(tmp_path, "good.jsonl", _lines(GOOD))
    for args, expected in [(["check", "--data", bad], f"{bad}:2: the file is not UTF-8"),
                           (["index", "--grad-batch-size", "0"], "'index.grad_batch_size' must be >= 1, got 0"),
                           (["check", "--data", good, "engine.name.x=1"], "'engine.name' is a setting, not a section")]:
        r = subprocess.run([GRADIAN, *map(str, args)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and expected in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---------------------------------------------------------------- scale

@pytest.mark.slow
def test_200k_row_check_in_bounded_memory(tmp_path):
    "gradian check on a 200,000-row file (no model): passes, shows a progress bar on stderr, peak RSS well under 1 GiB."
    import random
    rnd, words = random.Random(0), "the a city river old new large small capital country language north south".split()
    with open(tmp_path / "big.jsonl", "w") as f:
        for i in range(200_000):
            a = " ".join(rnd.choice(words) for _ in range(rnd.randint(5, 40)))
            f.write(json.dumps({"id": f"ex-{i}", "prompt": f"Question {i}: capital of country {i % 997}?", "completion": a}) + "\n")
    code = ("import resource, sys, time; from gradian.cli import main; t = time.time(); rc = main(sys.argv[1:]); "
            "print('RC', rc, 'WALL', round(time.time() - t, 1), 'MAXRSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, "check", "--data", str(tmp_path / "big.jsonl"), "--json"],
                       capture_output=True, text=True, timeout=1200, env={**os.environ, "COLUMNS": "100"})
    m = re.search(r"RC (\S+) WALL (\S+) MAXRSS_KB (\d+)", r.stderr)
    assert r.returncode == 0 and m, r.stderr[-2000:]
    print(f"200k rows: gradian check wall {m[2]} s, peak RSS {int(m[3]) / 1024:.0f} MiB")
    assert "reading big.jsonl" in r.stderr and "100%" in r.stderr                  # the progress bar
    assert [d["check_id"] for d in json.loads(r.stdout)] == ["checks.skipped"]
    assert int(m[3]) < 1024 * 1024
