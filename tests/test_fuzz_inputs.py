"""Property tests (hypothesis) over everything a user hands to Gradian: training and eval files as bytes (any encoding,
arbitrary bytes, huge lines, deep nesting, lone surrogates), rows with wrong types, missing and extra fields, odd ids
and roles out of order; YAML config text; dotted overrides; and `gradian check` with its number flags.

The property is the same everywhere: a valid load, or a `GradianError` (a `DataError` pointing at a line that exists),
and from the CLI exit code 0 or 2 with the file (and line) named on stderr. Never any other exception. Each test counts
its cases and prints the count (run with `-s` to see them). Examples are derandomized, so CI runs the same cases."""
import json, re, string, tempfile
from collections import Counter
from dataclasses import fields
from pathlib import Path

import hypothesis.configuration
hypothesis.configuration.set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "gradian-hypothesis")   # no .hypothesis/ in the repo

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from gradian.cli import main
from gradian.config import GradianConfig, _hints, apply_overrides, config_from_dict, config_to_dict, load_config
from gradian.core import DataError, GradianError
from gradian.data import ROLES, load_eval, load_train


def fuzz(n):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture,
                                           HealthCheck.large_base_example])


# ---------------------------------------------------------------- strategies

MARKERS = ["<|im_end|>", "<|im_start|>user\n", "<|endoftext|>", "[INST]", "<filename>", "</s>"]
texts = st.one_of(st.text(max_size=30),
                  st.sampled_from(MARKERS + ["", " ", "\n", "caf\u00e9", "\u2028", "\x00"]),
                  st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=2),   # lone surrogates
                  st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=3), st.integers(1000, 60_000)))   # huge values
leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=10**30), st.floats(), texts)
json_values = st.recursive(leaves, lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=6), ch, max_size=3), max_leaves=8)
ids = st.one_of(st.text(max_size=6), st.integers(-5, 5), st.sampled_from(["", "  ", "dup", 0]), st.booleans(), st.floats(), json_values)
roles = st.one_of(st.sampled_from(ROLES), st.sampled_from(["bot", "", "USER", "assistant "]), json_values)
messages = st.fixed_dictionaries({}, optional={"role": roles, "content": st.one_of(texts, json_values), "name": texts})
chat_lists = st.one_of(st.lists(messages, max_size=5),
                       st.lists(st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": texts}), max_size=6))  # well-formed, any order
extras = {"id": ids, "meta": json_values, "extra": json_values}
train_rows = st.one_of(
    st.fixed_dictionaries({"messages": st.one_of(chat_lists, json_values)}, optional=extras),
    st.fixed_dictionaries({"prompt": st.one_of(texts, chat_lists, json_values), "completion": st.one_of(texts, chat_lists, json_values)}, optional=extras),
    st.fixed_dictionaries({"instruction": st.one_of(texts, json_values), "output": st.one_of(texts, json_values)},
                          optional={**extras, "input": st.one_of(texts, json_values)}),
    st.fixed_dictionaries({}, optional={"prompt": texts, "completion": texts, "text": texts, "id": ids}),   # fields missing
    json_values)
eval_rows = st.one_of(
    st.fixed_dictionaries({"prompt": st.one_of(texts, json_values)},
                          optional={"answer": st.one_of(texts, json_values), "answers": st.one_of(st.lists(texts, max_size=3), json_values),
                                    "id": ids, "metric": st.one_of(st.sampled_from(["exact_match", "contains", "loglik", "bleu"]), json_values),
                                    "capability": st.one_of(texts, json_values)}),
    json_values)

# rows that are right, with odd but legal values (markers, huge text, unicode and integer ids, roles in any order), so the
# success path is fuzzed too, and a file of them may still fail as a whole (a duplicate id, a row without an assistant turn)
good_texts = st.one_of(st.text(max_size=30), st.sampled_from(MARKERS + ["caf\u00e9", "\U0001F600", "\u2028", "\t"]),
                       st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=3), st.integers(1000, 60_000)))
good_ids = st.one_of(st.text(min_size=1, max_size=6).filter(str.strip), st.integers(-10**12, 10**12))
good_extras = {"id": good_ids, "meta": st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5)), max_size=2)}
good_train_rows = st.one_of(
    st.fixed_dictionaries({"messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": good_texts}), min_size=1, max_size=5)},
                          optional=good_extras),
    st.fixed_dictionaries({"prompt": good_texts, "completion": good_texts}, optional=good_extras),
    st.fixed_dictionaries({"instruction": good_texts, "output": good_texts}, optional={**good_extras, "input": good_texts}))
good_eval_rows = st.fixed_dictionaries({"prompt": good_texts.filter(str.strip)},
                                       optional={"answer": st.one_of(good_texts, st.integers()), "answers": st.lists(good_texts, min_size=1, max_size=3),
                                                 "id": good_ids, "metric": st.sampled_from(["exact_match", "contains", "loglik"]), "capability": st.text(min_size=1, max_size=8).filter(str.strip)})


def _dump(row, ascii_):
    s = json.dumps(row, ensure_ascii=ascii_)
    return s.encode("utf-8", "surrogatepass")          # a raw lone surrogate becomes invalid UTF-8 bytes, as a broken exporter writes it


def lines(rows):
    "One line of a data file, as bytes: a dumped row, or something broken."
    return st.one_of(
        st.builds(_dump, rows, st.booleans()),
        st.builds(_dump, rows, st.booleans()),
        st.builds(lambda r: json.dumps(r).encode("utf-16"), rows),
        st.builds(lambda r: json.dumps(r, ensure_ascii=False).encode("latin-1", "replace"), rows),
        st.builds(lambda r, k: _dump(r, True)[:k], rows, st.integers(0, 40)),                       # truncated JSON
        st.builds(lambda n, o: (o * n).encode(), st.integers(1, 120_000), st.sampled_from(["[", "{", '{"a":'])),   # deep nesting
        st.binary(max_size=60),
        st.sampled_from([b"", b"   ", b"\t", b"\r", b"null", b"[]", b"{}", b'"\\ud800"', b"NaN", b"1e999"]))


def files(rows, good_rows):
    "A data file: broken or odd lines, or lines of good rows and blanks; joined with LF or CRLF, maybe behind a UTF-8 BOM."
    good_lines = st.one_of(st.builds(_dump, good_rows, st.booleans()), st.sampled_from([b"", b"  "]))
    return st.builds(lambda ls, crlf, bom: (b"\xef\xbb\xbf" if bom else b"") + (b"\r\n" if crlf else b"\n").join(ls),
                     st.one_of(st.lists(lines(rows), max_size=6), st.lists(good_lines, min_size=1, max_size=8)), st.booleans(), st.booleans())


def _check_error(e, path, data):
    "A DataError names the file, and a line that exists in it."
    if isinstance(e, DataError) and e.path is not None:
        assert str(e.path) == str(path), e
        if e.line is not None:
            assert 1 <= e.line <= data.count(b"\n") + 1, (e.line, str(e)[:300])
            assert str(e).startswith(f"{path}:{e.line}:"), str(e)[:300]


class Tally:
    "Counts outcomes per test and prints them at the end."
    def __init__(self, name): self.name, self.c = name, Counter()
    def __call__(self, outcome): self.c[outcome] += 1
    def report(self):
        print(f"\n[fuzz] {self.name}: {sum(self.c.values())} cases tried: " + ", ".join(f"{k} {v}" for k, v in sorted(self.c.items())))
        return sum(self.c.values())


# ---------------------------------------------------------------- loaders

def test_fuzz_load_train(tmp_path):
    t = Tally("load_train")

    @fuzz(400)
    @given(files(train_rows, good_train_rows))
    def run(data):
        p = tmp_path / "train.jsonl"; p.write_bytes(data)
        try: exs = load_train(p)
        except GradianError as e: _check_error(e, p, data); t(type(e).__name__); return
        t("loaded")
        assert exs and len({e.id for e in exs}) == len(exs)
        assert all(isinstance(e.id, str) and e.id.strip() for e in exs)
        assert all(any(m["role"] == "assistant" for m in e.messages) for e in exs)
        assert all(isinstance(m["content"], str) and m["role"] in ROLES for e in exs for m in e.messages)
        for e in exs: json.dumps(e.messages, ensure_ascii=False).encode("utf-8")   # every string is writable text
    run()
    assert t.report() >= 400 and t.c["loaded"] > 0 and t.c["DataError"] > 0


def test_fuzz_load_train_rows_in_memory():
    "The same rows handed over as Python dicts (a list, as a notebook or a datasets split gives them)."
    t = Tally("load_train(list)")

    @fuzz(300)
    @given(st.lists(st.one_of(train_rows, good_train_rows), max_size=5))
    def run(rows):
        try: exs = load_train(rows)
        except GradianError as e: t(type(e).__name__); return
        t("loaded"); assert len({e.id for e in exs}) == len(exs)
    run()
    assert t.report() >= 300 and t.c["loaded"] > 0


def test_fuzz_load_eval(tmp_path):
    t = Tally("load_eval")

    @fuzz(300)
    @given(files(eval_rows, good_eval_rows))
    def run(data):
        p = tmp_path / "eval.jsonl"; p.write_bytes(data)
        try: items = load_eval(p)
        except GradianError as e: _check_error(e, p, data); t(type(e).__name__); return
        t("loaded")
        assert items and all(it.prompt.strip() and it.answers and all(isinstance(a, str) for a in it.answers) for it in items)
        assert all(isinstance(it.capability, str) and it.capability.strip() for it in items)
    run()
    assert t.report() >= 300 and t.c["loaded"] > 0


# ---------------------------------------------------------------- config

def _keys():
    for s in fields(GradianConfig):
        for f in fields(_hints(GradianConfig)[s.name]): yield s.name, f.name


SECTIONS = [f.name for f in fields(GradianConfig)]
KEYS = [f"{s}.{k}" for s, k in _keys()]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 5000), st.integers(min_value=2**40), st.floats(), st.text(max_size=12),
                    st.sampled_from(["graddot", "datainf", "sjlt", "auto", "1e-4", "nan", "-inf", "down_proj[", "q_proj,v_proj", ""]))
config_values = st.recursive(scalars, lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=5), ch, max_size=2), max_leaves=5)
section_dicts = st.dictionaries(st.one_of(st.sampled_from([k for _, k in _keys()]), st.text(max_size=8)), config_values, max_size=4)
config_dicts = st.dictionaries(st.one_of(st.sampled_from(SECTIONS + ["tokenizer"]), st.text(max_size=8)), st.one_of(section_dicts, config_values), max_size=4)


PLAUSIBLE = [1, 8, 64, 0.5, 1e-4, None, True, "auto", "graddot", "datainf", "sjlt", "l2", "hf", "q_proj", ["q_proj", "v_proj"], "x.jsonl"]


def _nest(flat):
    d = {}
    for k, v in flat.items():
        s_, k_ = k.split(".")
        d.setdefault(s_, {})[k_] = v
    return d


DEFAULTS = {k: v for s_, sec in config_to_dict(GradianConfig()).items() for k, v in ((f"{s_}.{k_}", v_) for k_, v_ in sec.items())}
key_values = st.sampled_from(KEYS).flatmap(lambda k: st.tuples(st.just(k), st.one_of(st.just(DEFAULTS[k]), st.sampled_from(PLAUSIBLE))))
plausible_dicts = st.lists(key_values, max_size=4).map(lambda kvs: _nest(dict(kvs)))


def _yaml_bytes(d, flow):
    return yaml.safe_dump(d, default_flow_style=flow, allow_unicode=True).encode("utf-8", "surrogatepass")


yaml_files = st.one_of(
    st.builds(_yaml_bytes, config_dicts, st.booleans()),
    st.builds(_yaml_bytes, plausible_dicts, st.booleans()),
    st.builds(_yaml_bytes, plausible_dicts, st.booleans()),
    st.builds(lambda d: _yaml_bytes(d, False).decode("utf-8", "replace").encode("utf-16"), config_dicts),
    st.builds(lambda d: _yaml_bytes(d, False).decode("utf-8", "replace").encode("latin-1", "replace"), config_dicts),
    st.builds(lambda d: b"\xef\xbb\xbf" + _yaml_bytes(d, False), config_dicts),
    st.builds(lambda n, o: (o * n).encode(), st.integers(1, 20_000), st.sampled_from(["- ", "a: ", "? ", "x\n"])),
    st.text(max_size=80).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=80),
    st.sampled_from([b"[" * 3000, b"{" * 3000, b"", b"~", b"0", b"!!python/object:os.system {}", b"a: &x [*x]", b"engine: {name: !!binary aGk=}",
                     b"training:\n  seed: 2024-02-30\n", b"---\na: 1\n---\nb: 2\n", b"engine:\n\tname: x\n"]))


def _valid(cfg):
    "Every value in `cfg` passes the config's own checks (a round trip through config_from_dict re-checks them all)."
    assert config_from_dict(config_to_dict(cfg)) == cfg


def test_fuzz_load_config(tmp_path):
    t = Tally("load_config(YAML)")

    @fuzz(400)
    @given(yaml_files)
    def run(data):
        p = tmp_path / "gradian.yaml"; p.write_bytes(data)
        try: cfg = load_config(p)
        except GradianError as e: _check_error(e, p, data); t(type(e).__name__); return
        t("loaded"); _valid(cfg)
    run()
    assert t.report() >= 400 and t.c["loaded"] > 0 and t.c["GradianError"] > 0


overrides = st.one_of(
    key_values.map(lambda kv: f"{kv[0]}={json.dumps(kv[1])}"),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.sampled_from(["1", "8", "0.5", "1e-4", "null", "true", "auto", "graddot", "sjlt", "l2", "q_proj,v_proj"])),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.one_of(st.text(max_size=12), st.sampled_from(
        ["0", "-1", "1.5", "nan", ".inf", "1e-4", "null", "", "[a, b]", "{a: 1}", "true", "2024-02-30", "[[[[", "'x", "99999999999999999999"]))),
    st.builds(lambda k, s, v: f"{k}.{s}={v}", st.sampled_from(KEYS), st.text(max_size=4), st.text(max_size=6)),      # below a setting
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(SECTIONS + ["tokenizer", "engine.", ".x", ""]), st.text(max_size=6)),
    st.text(max_size=20))


def test_fuzz_apply_overrides():
    t = Tally("apply_overrides")

    @fuzz(500)
    @given(st.lists(overrides, max_size=3))
    def run(os_):
        try: cfg = apply_overrides(GradianConfig(), os_)
        except GradianError as e: t(type(e).__name__); assert str(e); return
        t("applied"); _valid(cfg)
    run()
    assert t.report() >= 500 and t.c["applied"] > 0 and t.c["GradianError"] > 0


# ---------------------------------------------------------------- the CLI

def _run(argv, capsys):
    try: rc = main([str(a) for a in argv])
    except SystemExit as e: rc = e.code          # argparse's usage errors
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_fuzz_cli_check(tmp_path, capsys):
    "`gradian check` on fuzzed data files: exit 0 or 1 (findings on stdout; 1 for ERROR ones) or 2 (file and line on stderr)."
    t = Tally("gradian check --data <fuzzed>")

    @fuzz(250)
    @given(files(train_rows, good_train_rows), st.sampled_from([[], ["--json"], ["--fail-on", "never"]]))
    def run(data, extra):
        p = tmp_path / "train.jsonl"; p.write_bytes(data)
        rc, out, err = _run(["check", "--data", p, "--no-progress", "--model", "none", *extra], capsys)
        assert "Traceback" not in err
        if rc in (0, 1):
            t(f"exit {rc}"); assert out
            assert rc == 0 or ("never" not in extra and ("ERROR" in out or '"error"' in out)), out[-500:]
            return
        assert rc == 2, (rc, err[-500:])
        assert err.startswith("gradian check: error: ") and str(p) in err, err[-500:]
        try: load_train(p)
        except DataError as e:
            if e.line is not None: assert f"{p}:{e.line}:" in err
        t("exit 2")
    run()
    assert t.report() >= 250 and t.c["exit 0"] + t.c["exit 1"] > 0 and t.c["exit 2"] > 0


def test_fuzz_cli_number_flags(tmp_path, capsys):
    "Any text for the number flags of check, index and train: checked at parse time (exit 2, the config key named), or accepted."
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"prompt": f"q{i}", "completion": "a"}) + "\n" for i in range(3)))
    t = Tally("gradian <cmd> --<number flag> <fuzzed>")
    flags = {"check": {"--max-seq-length": "data.max_seq_length"},
             "index": {"--grad-batch-size": "index.grad_batch_size", "--shard-size": "index.shard_size", "--projection-dim": "index.projection_dim",
                       "--projection-seed": "index.projection_seed"},
             "train": {"--lr": "training.lr", "--epochs": "training.epochs", "--r": "training.r", "--dropout": "training.dropout", "--seed": "training.seed"}}
    cmd_flag = st.sampled_from([(c, f) for c, fs in flags.items() for f in fs])
    values = st.one_of(st.text(max_size=10), st.integers(-10, 10).map(str), st.floats().map(repr),
                       st.sampled_from(["0", "-1", "1e-4", "nan", "inf", "none", "1_000", "0x10", "4294967296", "--json"]))

    @fuzz(300)
    @given(cmd_flag, values)
    def run(cf, v):
        cmd, flag = cf
        if cmd == "check": rc, out, err = _run(["check", "--data", good, "--no-progress", "--model", "none", f"{flag}={v}"], capsys)
        else:   # parse only: the command would load a model
            from gradian.cli import build_parser
            try: build_parser().parse_args([cmd, f"{flag}={v}"]); rc, err = 0, ""
            except SystemExit as e: rc, err = e.code, capsys.readouterr().err
        assert "Traceback" not in err
        if rc == 0: t("accepted"); return
        assert rc == 2 and f"gradian {cmd}: error: argument {flag}: " in err, err[-400:]
        assert flags[cmd][flag] in err or "expected one argument" in err, err[-400:]
        t("exit 2")
    run()
    assert t.report() >= 300 and t.c["accepted"] > 0 and t.c["exit 2"] > 0


def test_fuzz_check_with_tokenizer(smol_tokenizer):
    "Well-formed rows with roles in any order and odd content, through the real chat template: findings or a GradianError."
    from gradian.checks import check_data
    t = Tally("check_data(rows, SmolLM2 tokenizer)")
    turns = st.lists(st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": st.one_of(st.text(max_size=40), st.sampled_from(MARKERS))}),
                     min_size=1, max_size=5)

    @fuzz(60)
    @given(st.lists(st.fixed_dictionaries({"messages": turns}), min_size=1, max_size=3), st.sampled_from([None, 1, 8, 512]))
    def run(rows, msl):
        try: fs = check_data(rows, smol_tokenizer, max_seq_length=msl)
        except GradianError as e: t(type(e).__name__); assert str(e); return
        t("checked"); assert all(f.check_id for f in fs)
    run()
    assert t.report() >= 60 and t.c["checked"] > 0
