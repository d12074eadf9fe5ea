"""gradian.data against the real SmolLM2 tokenizer and real files: supervision masks, row formats, error messages."""
import json

import pytest

from gradian.core import DataError
from gradian.data import Example, load_eval, load_train, tokenize_example, length_facts, tokenize_examples


def _supervised_text(tok, te):
    return tok.decode([t for t, s in zip(te.input_ids, te.supervised) if s])


def _unsupervised_text(tok, te):
    return tok.decode([t for t, s in zip(te.input_ids, te.supervised) if not s])


def test_system_user_assistant_supervises_exactly_the_answer(smol_tokenizer):
    tok = smol_tokenizer
    ex = Example("x", [{"role": "system", "content": "You answer geography questions tersely."},
                       {"role": "user", "content": "What is the capital of Japan?"},
                       {"role": "assistant", "content": "Tokyo is the capital of Japan."}])
    te = tokenize_example(ex, tok)
    assert _supervised_text(tok, te) == "Tokyo is the capital of Japan.<|im_end|>"
    rest = _unsupervised_text(tok, te)
    assert "You answer geography questions tersely." in rest
    assert "What is the capital of Japan?" in rest
    assert "Tokyo" not in rest
    # the whole sequence is exactly the template rendering, with one BOS, no extra special tokens
    assert tok.decode(te.input_ids) == tok.apply_chat_template(ex.messages, tokenize=False)
    assert te.n_bos == 1 and te.has_chat_template and not te.truncated
    assert len(te.input_ids) == len(te.supervised) == te.n_tokens_full
    assert te.n_supervised == te.n_supervised_full == sum(te.supervised)


def test_multi_turn_supervises_both_assistant_turns(smol_tokenizer):
    tok = smol_tokenizer
    ex = Example("m", [{"role": "user", "content": "Name a primary colour."}, {"role": "assistant", "content": "Red."},
                       {"role": "user", "content": "Another one?"}, {"role": "assistant", "content": "Blue."}])
    te = tokenize_example(ex, tok)
    assert _supervised_text(tok, te) == "Red.<|im_end|>Blue.<|im_end|>"
    assert "Another one?" in _unsupervised_text(tok, te)
    # the two supervised runs are separate (the second user turn sits between them)
    runs = sum(1 for i, s in enumerate(te.supervised) if s and (i == 0 or not te.supervised[i - 1]))
    assert runs == 2


def test_truncation_facts(smol_tokenizer):
    ex = Example("t", [{"role": "user", "content": "Count."}, {"role": "assistant", "content": "one two three four five six"}])
    full = tokenize_example(ex, smol_tokenizer)
    cut = tokenize_example(ex, smol_tokenizer, max_seq_length=full.n_tokens_full - 3)
    assert len(cut.input_ids) == full.n_tokens_full - 3 and cut.truncated and cut.completion_truncated
    assert cut.n_supervised == sum(full.supervised[: full.n_tokens_full - 3]) < full.n_supervised_full
    facts = length_facts(tokenize_examples([ex], smol_tokenizer), max_seq_length=full.n_tokens_full - 3)
    assert facts["completion_truncated_ids"] == ["t"] and facts["max_tokens"] == full.n_tokens_full


def test_each_row_format_loads(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}], "meta": {"source": "chat"}},
            {"id": 42, "prompt": "2+2?", "completion": "4"},
            {"instruction": "Translate to German", "input": "dog", "output": "Hund"},
            {"instruction": "Say yes", "input": "", "output": "yes"}]
    p = tmp_path / "train.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    exs = load_train(p)
    assert [e.id for e in exs] == ["row-1", "42", "row-3", "row-4"]
    assert exs[0].messages[-1] == {"role": "assistant", "content": "Hello"} and exs[0].meta == {"source": "chat"}
    assert exs[1].messages == [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    assert exs[2].messages[0]["content"] == "Translate to German\n\ndog" and exs[2].text == "Hund"
    assert exs[3].messages[0]["content"] == "Say yes"
    assert all(e.source_path == str(p) for e in exs) and [e.source_line for e in exs] == [1, 2, 3, 4]


def test_hf_dataset_split_loads():
    from datasets import Dataset, DatasetDict
    dd = DatasetDict({"train": Dataset.from_list([{"prompt": "a", "completion": "b"}]),
                      "test": Dataset.from_list([{"prompt": "c", "completion": "d"}])})
    assert load_train(dd, split="test")[0].messages[1]["content"] == "d"
    assert load_train(dd)[0].messages[1]["content"] == "b"   # "train" by default


def _write(tmp_path, lines):
    p = tmp_path / "train.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


GOOD = json.dumps({"prompt": "q", "completion": "a"})


def test_bad_json_on_line_7_names_file_and_line(tmp_path):
    lines = [json.dumps({"id": f"r{i}", "prompt": "q", "completion": "a"}) for i in range(6)] + ['{"prompt": "q", "completion": "a"']
    p = _write(tmp_path, lines)
    with pytest.raises(DataError) as ei:
        load_train(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}:7: invalid JSON")
    assert "fix:" in msg
    assert ei.value.line == 7 and ei.value.path == str(p)


def test_blank_lines_keep_true_line_numbers(tmp_path):
    p = _write(tmp_path, [GOOD, "", "", json.dumps({"messages": [{"role": "user", "content": "q"}]})])
    with pytest.raises(DataError) as ei:
        load_train(p)
    assert str(ei.value).startswith(f"{p}:4: field 'messages': row has no assistant turn")
    assert 'add {"role": "assistant"' in str(ei.value)


def test_other_bad_rows(tmp_path):
    cases = {
        '"just a string"': "expected a JSON object, got str",
        json.dumps({"text": "hello"}): "unknown row format (keys: text)",
        json.dumps({"messages": {"role": "user"}}): "field 'messages': expected a list of messages",
        json.dumps({"messages": [{"role": "human", "content": "x"}]}): "field 'messages[0].role': role must be one of",
        json.dumps({"messages": [{"role": "assistant"}]}): "field 'messages[0]': message has no 'content'",
        json.dumps({"prompt": "q", "completion": "a", "meta": "x"}): "field 'meta': expected an object",
    }
    for line, expected in cases.items():
        p = _write(tmp_path, [GOOD, line])
        with pytest.raises(DataError) as ei:
            load_train(p)
        assert str(ei.value).startswith(f"{p}:2: {expected}"), (line, str(ei.value))
    p = _write(tmp_path, [json.dumps({"id": "a", "prompt": "q", "completion": "x"}), GOOD, json.dumps({"id": "a", "prompt": "q2", "completion": "y"})])
    with pytest.raises(DataError) as ei:
        load_train(p)
    assert str(ei.value).startswith(f"{p}:3: field 'id': duplicate id 'a' (first used at line 1)")


def test_eval_loader(tmp_path):
    p = tmp_path / "eval.jsonl"
    p.write_text(json.dumps({"prompt": "Capital of Spain?", "answer": "Madrid", "capability": "geo"}) + "\n"
                 + json.dumps({"id": "n", "prompt": "2+3?", "answers": ["5", "five"], "metric": "loglik"}) + "\n")
    a, b = load_eval(p)
    assert (a.id, a.capability, a.metric, a.answers, a.source_line) == ("row-1", "geo", "exact_match", ["Madrid"], 1)
    assert (b.id, b.capability, b.metric, b.answers) == ("n", "default", "loglik", ["5", "five"])
    p.write_text(json.dumps({"prompt": "x", "answer": "y"}) + "\n" + json.dumps({"prompt": "x", "answer": "y", "metric": "f1"}) + "\n")
    with pytest.raises(DataError) as ei:
        load_eval(p)
    assert str(ei.value).startswith(f"{p}:2: field 'metric': unknown metric 'f1'") and "exact_match, contains, loglik" in str(ei.value)
