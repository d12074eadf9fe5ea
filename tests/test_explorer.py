"""The report explorer, headless: a report folder is written, the widgets are driven by setting their
values (as a user's clicks would), and what the HTML widgets and plot outputs then hold is read back."""
import base64, json, os, subprocess, sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gradian.core import GradianError, write_json
from gradian.explorer import Explorer, load_report
from gradian.report import Report, SIGN_CONVENTION, _one_line
from gradian.testing import HOSTILE_STRINGS, hostile_report

ROOT = Path(__file__).resolve().parents[1]


class Page(HTMLParser):
    "What an HTML widget value holds: its elements (with attributes), its table rows as cell texts, all its text, comments."
    def __init__(self, html: str):
        super().__init__(); self.tags, self.rows, self.text, self.other = [], [], [], []
        self._cell = None; self.feed(html); self.close()
    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "tr": self.rows.append([])
        if tag in ("td", "th"): self._cell = []
    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None: self.rows[-1].append("".join(self._cell)); self._cell = None
    def handle_data(self, d):
        self.text.append(d)
        if self._cell is not None: self._cell.append(d)
    def handle_comment(self, d): self.other.append(d)
    def handle_decl(self, d): self.other.append(d)


def table_rows(html: str) -> list[dict]:
    "The body rows of the first table in `html`, as {header: cell text}."
    rows = Page(html).rows
    return [dict(zip(rows[0], r)) for r in rows[1:]] if rows else []


def values(w) -> list: return [v for _, v in w.options]


def _cap(name, delta, gated):
    return dict(name=name, metric="contains", base=1.0, tuned=1.0 + delta, delta=delta, ci_low=delta - 0.2, ci_high=min(delta + 0.2, 0.1), n=10,
                gated=gated, proxy_used=False)

def _clu(cid, delta, ids, accused, rank):
    return dict(id=cid, label=f"topic {cid}", size=len(ids), score=delta * 40, predicted_loss_delta_if_removed=delta, rank=rank, p_value=0.01,
                example_ids=ids, accused_example_ids=accused, exemplars=[{"id": ids[0], "score": delta * 20, "text": f"text of {ids[0]}"}])

def _ex(eid, score, cluster, item, accused=False):
    return dict(id=eid, score=score, predicted_loss_delta_if_removed=score / 40, cluster=cluster, strength_z=score, most_affected_item=item, accused=accused)

def _span(rank, score, text): return dict(rank=rank, score=score, score_sum=3 * score, tokens=3, text=text, start=0, end=len(text))


def make_report(capabilities=("capitals", "dates", "sums")) -> Report:
    "Capitals and dates gated, sums not; clusters 2a (capitals) and 4 (dates) harmful, 1 weakly harmful for both, 0 helpful; spans inside p2."
    caps = [c for c in (_cap("capitals", -0.7, True), _cap("dates", -0.5, True), _cap("sums", 0.0, False)) if c["name"] in capabilities]
    items = [(i, c) for i, c in (("cap-q1", "capitals"), ("cap-q2", "capitals"), ("date-q1", "dates"), ("date-q2", "dates")) if c in capabilities]
    return Report("attributed", "capitals and dates regressed", {"kind": "cluster", "text": "cluster 2a"}, capabilities=caps,
        clusters=[_clu("2a", -0.9, ["p1", "p2", "p3"], ["p1", "p2"], 1), _clu("4", -0.5, ["d1", "d2"], ["d1"], 2),
                  _clu("1", -0.05, ["c1", "c2"], [], 3), _clu("0", 0.3, ["w1", "p4"], [], 4)],
        examples=[_ex("p1", -8.0, "2a", "cap-q1", True), _ex("p2", -6.0, "2a", "cap-q2", True), _ex("d1", -5.0, "4", "date-q1", True),
                  _ex("p3", -3.0, "2a", "cap-q1"), _ex("d2", -2.0, "4", "date-q2"), _ex("c1", -1.0, "1", "cap-q2"), _ex("c2", -0.5, "1", "date-q1"),
                  _ex("p4", 1.0, "0", "cap-q1@0.5"), _ex("w1", 4.0, "0", "cap-q2")],
        spans=[dict(example_id="p2", item_id="cap-q2", culprit="Paris is in Italy.", note="9 supervised tokens",
                    spans=[_span(2, -0.1, "A long entry about travel."), _span(1, -0.9, "Paris is in Italy."), _span(3, 0.05, "Enjoy the trip.")])],
        provenance={"manifest": {}, "engine": {"engine": "datainf"}, "query_signal": "contrastive", "timings": {}, "sign_convention": SIGN_CONVENTION},
        regressed_items=[dict(id=i, capability=c, prompt="?", answers=["a"], base=1.0, tuned=0.0) for i, c in items])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_report().save(tmp_path_factory.mktemp("explorer") / "report")


def test_refuses_a_folder_without_report_json(tmp_path):
    with pytest.raises(GradianError, match="holds no report.json") as e: Explorer(tmp_path)
    assert "gradian analyze" in e.value.fix
    (tmp_path / "report.json").write_text(json.dumps({"verdict": "refused"}))
    with pytest.raises(GradianError, match="does not match schema"): load_report(tmp_path)


def test_capabilities_in_the_dropdown(folder, tmp_path):
    ex = Explorer(folder)
    assert values(ex.capability) == ["capitals", "dates", "sums"] and ex.capability.value == "capitals"
    one = Explorer(make_report(("dates",)).save(tmp_path / "one"))
    assert values(one.capability) == ["dates"] and values(one.cluster) == ["4", "1"]
    assert Page(one.capability_info.value).text[0] == "dates"


def test_selected_cluster_shows_its_examples(folder):
    ex = Explorer(folder)
    assert ex.cluster.value == "2a"                                        # the most harmful one is selected first
    rows = table_rows(ex.examples_table.value)
    assert [r["id"] for r in rows] == ["p1", "p2", "p3"]
    assert [r["accused"] for r in rows] == ["yes", "yes", ""] and rows[0]["score"] == "-8" and rows[0]["text"] == "text of p1"
    assert [r["rank"] for r in rows] == ["1", "2", "4"] and rows[1]["spans"] == "yes"
    ex.cluster.value = "1"
    rows = table_rows(ex.examples_table.value)
    assert [r["id"] for r in rows] == ["c1", "c2"] and values(ex.example) == ["c1", "c2"]
    assert "<code>1</code>" in ex.cluster_info.value and "topic 1" in ex.cluster_info.value


def test_capability_picks_its_clusters_ranked_by_harm(folder):
    ex = Explorer(folder)
    assert values(ex.cluster) == ["2a", "1"]
    ex.capability.value = "dates"
    assert values(ex.cluster) == ["4", "1"] and ex.cluster.value == "4"
    assert [r["id"] for r in table_rows(ex.examples_table.value)] == ["d1", "d2"]
    ex.capability.value = "sums"                                           # not gated: no cluster, no examples, no plot
    assert values(ex.cluster) == [] and ex.example.options == () and ex.plot.outputs == ()
    assert "not gated" in ex.capability_info.value and "No cluster to show" in ex.cluster_info.value and ex.examples_table.value == ""


def test_harmful_only_switch(folder):
    ex = Explorer(folder)
    ex.cluster.value = "1"
    ex.harmful_only.value = False
    assert values(ex.cluster) == ["2a", "1", "0"] and ex.cluster.value == "1"     # the helpful cluster joins, last; the selection stays
    ex.cluster.value = "0"
    assert [r["id"] for r in table_rows(ex.examples_table.value)] == ["p4", "w1"] and "helpful" in ex.cluster_info.value
    ex.harmful_only.value = True
    assert values(ex.cluster) == ["2a", "1"] and ex.cluster.value == "2a"


def test_span_rows_for_an_example_with_spans(folder):
    ex = Explorer(folder)
    assert ex.example.value == "p1" and "No span scores" in ex.spans_table.value and ex.span_plot.outputs == ()
    ex.example.value = "p2"
    rows = table_rows(ex.spans_table.value)
    assert [(r["rank"], r["span"]) for r in rows] == [("1", "Paris is in Italy."), ("2", "A long entry about travel."), ("3", "Enjoy the trip.")]
    assert [r["score (per token)"] for r in rows] == ["-0.9", "-0.1", "+0.05"]
    assert "<td><b>Paris is in Italy.</b></td>" in ex.spans_table.value and "<code>cap-q2</code>" in ex.spans_table.value
    assert [r[""] for r in table_rows(ex.examples_table.value)] == ["", "▶", ""]
    assert ex.span_plot.outputs[0]["data"]["text/plain"] == "bar chart: 3 span scores of p2"
    ex.example.value = "p3"
    assert "No span scores" in ex.spans_table.value and ex.span_plot.outputs == ()


def _png(out) -> bytes:
    assert len(out.outputs) == 1 and out.outputs[0]["output_type"] == "display_data"
    return base64.b64decode(out.outputs[0]["data"]["image/png"])


def test_plot_output_gets_a_figure(folder):
    ex = Explorer(folder)
    first = _png(ex.plot)
    assert first[:8] == b"\x89PNG\r\n\x1a\n" and len(first) > 2000
    assert ex.plot.outputs[0]["data"]["text/plain"] == "bar chart: scores of 3 members of cluster 2a"
    ex.cluster.value = "1"
    assert _png(ex.plot) != first and ex.plot.outputs[0]["data"]["text/plain"] == "bar chart: scores of 2 members of cluster 1"
    ex.example.value = "c2"                                                # choosing an example leaves the cluster's plot alone
    assert ex.plot.outputs[0]["data"]["text/plain"].endswith("cluster 1")


OURS = {"p", "b", "i", "code", "table", "thead", "tbody", "tr", "th", "td"}


@pytest.mark.parametrize("s", HOSTILE_STRINGS, ids=range(len(HOSTILE_STRINGS)))
def test_hostile_strings_display_as_text(s, tmp_path):
    write_json(tmp_path / "report.json", hostile_report(s).to_json())
    ex = Explorer(tmp_path)
    assert (ex.capability.value, ex.cluster.value, ex.example.value) == (s, s, s)   # every level reached through the hostile values
    for w in (ex.capability_info, ex.cluster_info, ex.examples_table, ex.spans_table):
        p = Page(w.value)
        assert {t for t, _ in p.tags} <= OURS, (s, w.value)
        assert not any(a.startswith("on") for _, at in p.tags for a in at) and not p.other, (s, w.value)
        assert "<script" not in w.value.lower() and "<img" not in w.value.lower() and "<h1" not in w.value.lower()
    shown = _one_line(s)
    assert table_rows(ex.examples_table.value)[0]["id"] == shown and table_rows(ex.examples_table.value)[0]["text"] == shown
    assert table_rows(ex.spans_table.value)[0]["span"] == shown and shown in "".join(Page(ex.cluster_info.value).text)
    assert _png(ex.plot)[:4] == b"\x89PNG" and _png(ex.span_plot)[:4] == b"\x89PNG"


def test_import_gradian_does_not_import_ipywidgets():
    code = "import sys, gradian, gradian.report, gradian.report_html; assert 'ipywidgets' not in sys.modules and 'gradian.explorer' not in sys.modules"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr


def test_without_ipywidgets_the_import_says_how_to_install_it():
    code = "import sys; sys.modules['ipywidgets'] = None\ntry: import gradian.explorer\nexcept Exception as e: print(type(e).__name__, e)"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.stdout.startswith("GradianError the report explorer needs ipywidgets") and 'pip install ipywidgets' in res.stdout, res.stdout + res.stderr


@pytest.mark.slow
def test_explorer_on_an_analyzed_fine_tune(tmp_path):
    "A report `analyze` wrote for a tiny poisoned fine-tune: every cluster of every capability shows exactly its members (about a minute)."
    from gradian.analyze import analyze
    from gradian.testing import poisoned_finetune
    ft = poisoned_finetune(tmp_path / "ft")
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps({"prompt": i.prompt, "answer": i.answers[0], "metric": i.metric, "capability": i.capability}) + "\n"
                                                 for i in ft.items))
    analyze(ft.model, None, ft.examples, tmp_path / "eval.jsonl", tmp_path / "report", cfg=ft.cfg, tokenizer=ft.tokenizer, log=None, progress=False)
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    ex = Explorer(tmp_path / "report")
    ex.harmful_only.value = False
    assert values(ex.capability) == [c["name"] for c in rep["capabilities"]] and values(ex.cluster)
    assert sorted(values(ex.cluster)) == sorted(c["id"] for c in rep["clusters"])          # one capability: all its clusters are linked
    deltas = [next(c for c in rep["clusters"] if c["id"] == i)["predicted_loss_delta_if_removed"] for i in values(ex.cluster)]
    assert deltas == sorted(deltas)
    for cid in values(ex.cluster):
        ex.cluster.value = cid
        want = next(c for c in rep["clusters"] if c["id"] == cid)["example_ids"]
        assert sorted(r["id"] for r in table_rows(ex.examples_table.value)) == sorted(want)
        assert _png(ex.plot)[:4] == b"\x89PNG"
