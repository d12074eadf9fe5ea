"""`gradian check` as a user runs it: the console script in a subprocess, real files, real exit codes."""
import json, subprocess, sys
from pathlib import Path

import pytest

GRADIAN = str(Path(sys.executable).with_name("gradian"))
GOOD = [{"prompt": f"What is {a} plus {b}?", "completion": f"{a + b}."} for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (2, 2), (9, 1)]]


def _run(*args):
    return subprocess.run([GRADIAN, *map(str, args)], capture_output=True, text=True, timeout=300)


def _write(path, lines):
    path.write_text("\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines) + "\n")
    return path


def test_bad_json_on_line_7(tmp_path):
    f = _write(tmp_path / "train.jsonl", GOOD + ['{"prompt": "What is 1 plus 1?", "completion": "2."'])
    r = _run("check", "--data", f)
    assert r.returncode == 2
    assert f"{f}:7: invalid JSON" in r.stderr and "fix: each line must hold exactly one complete JSON object" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_row_without_assistant_turn(tmp_path):
    rows = GOOD[:3] + [{"messages": [{"role": "user", "content": "Hello?"}]}] + GOOD[3:]
    f = _write(tmp_path / "train.jsonl", rows)
    r = _run("check", "--data", f)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{f}:4: field 'messages': row has no assistant turn" in r.stderr
    assert '"role": "assistant"' in r.stderr          # the fix says what is expected


def test_unknown_format_and_missing_file(tmp_path):
    f = _write(tmp_path / "train.jsonl", GOOD[:2] + [{"question": "x", "answer": "y"}])
    r = _run("check", "--data", f)
    assert r.returncode == 2 and f"{f}:3: unknown row format (keys: question, answer)" in r.stderr and "prompt" in r.stderr
    r = _run("check", "--data", tmp_path / "nope.jsonl")
    assert r.returncode == 2 and "data file not found" in r.stderr and "Traceback" not in r.stderr


def test_truncation_findings_with_counts(tmp_path):
    long = [{"prompt": f"Describe city {i}.", "completion": " ".join([f"City {i} has old streets and a busy river port."] * 6)} for i in range(3)]
    f = _write(tmp_path / "train.jsonl", GOOD + long)
    r = _run("check", "--data", f, "--model", "embedded", "--max-seq-length", 64, "--json")
    assert r.returncode == 1, r.stderr                                 # an ERROR finding fails the check, as linters do
    found = {d["check_id"]: d for d in json.loads(r.stdout)}
    assert set(found) == {"data.completion_truncated", "config.max_seq_length_vs_data"}
    for cid in found: assert found[cid]["count"] == 3 and sorted(found[cid]["example_ids"]) == ["row-7", "row-8", "row-9"]
    assert [d["severity"] for d in json.loads(r.stdout)] == ["error", "warning"]      # most severe first
    text = _run("check", "--data", f, "--model", "embedded", "--max-seq-length", 64)
    assert text.stdout.index("data.completion_truncated  [3]") < text.stdout.index("config.max_seq_length_vs_data  [3]")
    assert _run("check", "--data", f, "--model", "embedded", "--max-seq-length", 64, "--fail-on", "never").returncode == 0
    assert _run("check", "--data", f, "--model", "embedded", "--max-seq-length", 512, "--fail-on", "info").returncode == 0


def test_without_model_token_checks_are_reported_skipped(tmp_path):
    r = _run("check", "--data", _write(tmp_path / "train.jsonl", GOOD), "--model", "none", "--json")
    assert r.returncode == 0
    (f,) = json.loads(r.stdout)
    assert f["check_id"] == "checks.skipped" and "data.completion_truncated" in f["details"]["skipped"]


def test_default_model_is_the_embedded_one_and_errors_fail(tmp_path):
    "Like `train` and `analyze`, `check` defaults to the config's model (embedded): the token checks run, no skip finding."
    long = [{"prompt": "Describe the city.", "completion": " ".join(["It has old streets and a busy river port."] * 40)}]
    r = _run("check", "--data", _write(tmp_path / "train.jsonl", GOOD + long), "--json")
    found = {d["check_id"]: d["severity"] for d in json.loads(r.stdout)}
    assert "checks.skipped" not in found and found.get("data.completion_truncated") is None, found   # 512 tokens hold it
    assert r.returncode == 0, r.stderr
    r = _run("check", "--data", _write(tmp_path / "short.jsonl", GOOD + long), "--max-seq-length", 32, "--json")
    assert r.returncode == 1 and "data.completion_truncated" in r.stdout and "Traceback" not in r.stderr
