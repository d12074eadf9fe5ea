"""A report cannot be forged: hostile user strings in every field of a `Report` render as literal text (checked with a real
CommonMark parser, markdown-it), the files are written as one sealed set with normal permissions, and a failed write leaves
the previous report intact."""
import errno, json

import pytest
from markdown_it import MarkdownIt

import gradian.report as report_mod
from gradian.core import GradianError, umask
from gradian.report import REPORT_SEAL, _one_line, verify_report
from gradian.testing import HOSTILE_STRINGS as HOSTILE, hostile_report as _hostile_report

def _texts(tokens) -> list[str]:
    "The literal text of each inline run (a paragraph, a heading, a table cell), as a reader sees it."
    out = []
    for t in tokens:
        if t.type == "inline": out.append(" ".join("".join(c.content for c in t.children if c.type in ("text", "code_inline")).split()))
    return out


@pytest.mark.parametrize("s", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_strings_render_as_literal_text(s):
    r = _hostile_report(s)
    tokens = MarkdownIt("commonmark").enable("table").parse(r.to_markdown())
    kinds = {t.type for t in tokens} | {c.type for t in tokens if t.children for c in t.children}
    assert not kinds & {"html_block", "html_inline", "link_open", "image", "fence", "code_block", "blockquote_open", "ordered_list_open"}, kinds
    heads = [(t.tag, tokens[i + 1].content) for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert heads == [("h1", "Gradian report: **ATTRIBUTED**")] + [("h2", h) for h, _ in r.md_sections()], heads
    want = " ".join(_one_line(s).split())
    texts = _texts(tokens)
    # each field shows the string whole, inside one paragraph or cell: the summary, the lead, capability, cluster label, ...
    assert sum(want in t for t in texts) >= 12, (want, texts)


def test_the_report_files_are_one_sealed_set_with_normal_permissions(tmp_path):
    out = _hostile_report("x").save(tmp_path / "r")
    seal = verify_report(out)
    assert sorted(seal) == ["figures/capability_deltas.png", "figures/cluster_effects.png", "manifest.json", "report.json", "report.md"]
    assert {p.name: p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file()} == {n.split("/")[-1]: 0o666 & ~umask() for n in [*seal, REPORT_SEAL]}
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("fail_at", ["figure", "markdown", "json"])
def test_a_failed_write_leaves_the_previous_report_intact(tmp_path, monkeypatch, fail_at):
    out = _hostile_report("old").save(tmp_path / "r")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    def full(*a, **k): raise OSError(errno.ENOSPC, "No space left on device")
    target = {"figure": "save_figures", "markdown": "atomic_write", "json": "write_json"}[fail_at]
    monkeypatch.setattr(report_mod, target, full)
    with pytest.raises(OSError): _hostile_report("new").save(out)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    verify_report(out)


def test_an_interrupted_move_leaves_an_unsealed_folder(tmp_path, monkeypatch):
    out = _hostile_report("old").save(tmp_path / "r")
    real, n = report_mod.os.replace, []
    def dies_on_second(a, b):                                   # os is one module: count only the moves out of the staging folder
        if ".report-staging-" in str(a) and ".report-staging-" not in str(b): n.append(b)
        if len(n) == 2: raise KeyboardInterrupt
        return real(a, b)
    monkeypatch.setattr(report_mod.os, "replace", dies_on_second)
    with pytest.raises(KeyboardInterrupt): _hostile_report("new").save(out)
    monkeypatch.setattr(report_mod.os, "replace", real)
    with pytest.raises(GradianError, match=REPORT_SEAL): verify_report(out)
    assert json.loads((out / "report.json").read_text())["summary"] == "old"     # report.json moves last: still the old one
