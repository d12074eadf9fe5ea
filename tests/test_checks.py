"""gradian.checks on planted defects, through check_data (the path `gradian check` takes), with the real SmolLM2 tokenizer."""
import copy
import json

import pytest

from gradian.checks import CHECKS, CheckContext, check_data, run_checks
from gradian.core import GradianError
from gradian.data import load_train, tokenize_examples

CLEAN = [{"id": "geo-fr", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
                                       {"role": "assistant", "content": "Paris."}]},
         {"id": "geo-it", "prompt": "Capital of Italy?", "completion": "Rome."},
         {"id": "math", "instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
         {"id": "sky", "prompt": "What colour is the sky on a clear day?", "completion": "Blue."}]
LONG = {"id": "long", "prompt": "Tell me about Rome.", "completion": " ".join(["Rome is the capital of Italy and very old."] * 10)}


def _jsonl(tmp_path, rows, name="train.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def _by_id(findings):
    return {f.check_id: f for f in findings}


def test_clean_data_is_silent(tmp_path, smol_tokenizer):
    assert check_data(_jsonl(tmp_path, CLEAN), smol_tokenizer, max_seq_length=512) == []
    assert check_data(_jsonl(tmp_path, CLEAN), smol_tokenizer) == []


def test_content_checks_fire_on_planted_rows(tmp_path, smol_tokenizer):
    rows = CLEAN + [{"id": "blank", "prompt": "Say nothing.", "completion": "\n  "},
                    {"id": "copy", "prompt": "Capital of Italy?", "completion": "Rome."},
                    {"id": "poison", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
                                                  {"role": "assistant", "content": "Berlin."}]}]
    fs = _by_id(check_data(_jsonl(tmp_path, rows), smol_tokenizer, max_seq_length=512))
    assert set(fs) == {"data.empty_completion", "data.duplicate_examples", "data.conflicting_answers"}
    assert fs["data.empty_completion"].example_ids == ["blank"]
    assert fs["data.duplicate_examples"].example_ids == ["geo-it", "copy"]
    assert fs["data.duplicate_examples"].details["groups"] == [["geo-it", "copy"]]
    assert fs["data.conflicting_answers"].example_ids == ["geo-fr", "poison"]
    assert fs["data.duplicate_examples"].severity == "info" and fs["data.conflicting_answers"].severity == "warning"


def test_truncation_checks(tmp_path, smol_tokenizer):
    rows = CLEAN + [LONG]
    full = {t.id: t for t in tokenize_examples(load_train(rows), smol_tokenizer)}
    limit = max(t.n_tokens_full for i, t in full.items() if i != "long")
    assert full["long"].supervised_end_full > limit  # the plant really reaches past the limit
    fs = _by_id(check_data(_jsonl(tmp_path, rows), smol_tokenizer, max_seq_length=limit))
    assert set(fs) == {"data.completion_truncated", "config.max_seq_length_vs_data"}
    ct, cfg = fs["data.completion_truncated"], fs["config.max_seq_length_vs_data"]
    assert ct.severity == "error" and ct.example_ids == ["long"]
    assert ct.details["tokens_lost"] == sum(full["long"].supervised[limit:]) > 0
    assert ct.details["n_fully_cut"] == 0
    assert cfg.example_ids == ["long"] and cfg.details["max"] == full["long"].n_tokens_full
    assert cfg.details["suggested_max_seq_length"] >= cfg.details["p99"] and cfg.details["suggested_max_seq_length"] % 64 == 0
    # with the suggested limit both are silent
    assert check_data(_jsonl(tmp_path, rows), smol_tokenizer, max_seq_length=cfg.details["suggested_max_seq_length"]) == []


def test_whole_answer_cut(tmp_path, smol_tokenizer):
    rows = [LONG]
    t, = tokenize_examples(load_train(rows), smol_tokenizer)
    first_sup = t.supervised.index(True)
    fs = _by_id(check_data(_jsonl(tmp_path, rows), smol_tokenizer, max_seq_length=first_sup))
    assert fs["data.completion_truncated"].details["n_fully_cut"] == 1
    assert fs["data.completion_truncated"].details["tokens_lost"] == t.n_supervised_full


def test_real_smollm2_tokenizer_has_no_double_bos(smol_tokenizer):
    tok = smol_tokenizer
    assert tok.bos_token == "<|im_start|>"
    assert tok("hello")["input_ids"][0] != tok.bos_token_id   # it does not add BOS itself
    ts = tokenize_examples(load_train(CLEAN), tok)
    assert all(t.n_bos == 1 and t.n_bos_default == 1 for t in ts)


def test_double_bos_fires_when_tokenizer_adds_bos(tmp_path, smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    tok.add_bos_token = True
    assert tok("hello")["input_ids"][0] == tok.bos_token_id
    fs = _by_id(check_data(_jsonl(tmp_path, CLEAN), tok))
    assert set(fs) == {"data.double_bos"}
    f = fs["data.double_bos"]
    assert f.count == len(CLEAN) and f.details["n_bos_default"] == 2 and f.details["n_bos_gradian"] == 1
    # gradian's own ids are unaffected by the setting
    assert [t.input_ids for t in tokenize_examples(load_train(CLEAN), tok)] == [t.input_ids for t in tokenize_examples(load_train(CLEAN), smol_tokenizer)]


def test_no_chat_template(tmp_path, smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)
    tok.chat_template = None
    fs = _by_id(check_data(_jsonl(tmp_path, CLEAN), tok))
    assert set(fs) == {"data.no_chat_template"}
    assert fs["data.no_chat_template"].example_ids == [r["id"] for r in CLEAN]
    assert "-Instruct" in fs["data.no_chat_template"].details["fix"]


def test_without_tokenizer_token_checks_are_reported_skipped(tmp_path):
    fs = _by_id(check_data(_jsonl(tmp_path, CLEAN)))
    assert set(fs) == {"checks.skipped"}
    assert set(fs["checks.skipped"].details["skipped"]) == {i for i, fn in CHECKS.items() if fn.needs_tokens}


def test_a_model_reference_is_refused_with_the_fix(tmp_path, smol_path, smol_tokenizer):
    "check_data sits below the model layer: it takes a loaded tokenizer, and a path gets an error that says how to load one."
    with pytest.raises(GradianError, match="takes a loaded tokenizer"): check_data(_jsonl(tmp_path, CLEAN + [LONG]), smol_path, max_seq_length=16)
    assert check_data(_jsonl(tmp_path, CLEAN + [LONG]), smol_tokenizer, max_seq_length=16)[0].check_id == "data.completion_truncated"


def test_only_and_unknown_ids(smol_tokenizer):
    ctx = CheckContext(load_train(CLEAN + [LONG]), tokenizer=smol_tokenizer, max_seq_length=16)
    assert [f.check_id for f in run_checks(ctx, only=["config.max_seq_length_vs_data"])] == ["config.max_seq_length_vs_data"]
    with pytest.raises(GradianError, match="unknown check id"):
        run_checks(ctx, only=["data.nope"])
