"""A fine-tune that broke two capabilities through two groups of rows gets one accused set per capability (issue 36).

The tiny real fine-tune of `gradian.testing.poisoned_finetune` (trained 120 steps, as 28_attribution's example) plants one
wrong answer for ten capital questions. Its eval items are split into two capabilities (the first five questions, the last
five). `analyze` must give each gated capability its own entry in report.json, accusing planted rows only and some of its
own, say in report.md which rows broke which capability, and let `--mask-ids @report.json#<capability>` take one set.
Every planted row here teaches the same answer ("Lyon."), so the two sets overlap; how well different causes are kept apart
is measured on the bank's several-cause scenarios (benchmarks/attribution.py)."""
import json
from dataclasses import replace

import pytest

from gradian.analyze import analyze
from gradian.cli import read_ids
from gradian.testing import poisoned_finetune


@pytest.fixture(scope="module")
def two_capabilities(tmp_path_factory):
    root = tmp_path_factory.mktemp("several")
    ft = poisoned_finetune(root / "ft", steps=120)
    ev = root / "eval.jsonl"
    cap = lambda i: "capitals-a" if i < 5 else "capitals-b"
    ev.write_text("".join(json.dumps({"prompt": it.prompt, "answer": it.answers[0], "metric": it.metric,
                                      "capability": cap(int(it.id[1:]))}) + "\n" for it in ft.items))
    cfg = replace(ft.cfg, evaluation=replace(ft.cfg.evaluation, min_items=5))     # five items per capability
    a = analyze(ft.model, None, ft.examples, ev, root / "report", cfg=cfg, tokenizer=ft.tokenizer, log=None, progress=False)
    return root, ft, a


def test_each_gated_capability_has_its_own_accused_set(two_capabilities):
    root, ft, a = two_capabilities
    rep = json.loads((root / "report" / "report.json").read_text())
    caps = {c["name"]: c for c in rep["capabilities"]}
    assert set(caps) == {"capitals-a", "capitals-b"} and all(c["gated"] for c in caps.values())
    own = {"capitals-a": {f"planted{i}" for i in range(5)}, "capitals-b": {f"planted{i}" for i in range(5, 10)}}
    for name, c in caps.items():
        e = c["attribution"]
        assert e["verdict"] == "attributed" and e["accused_example_ids"], (name, e)
        assert set(e["accused_example_ids"]) <= own["capitals-a"] | own["capitals-b"], e   # planted rows only
        assert own[name] & set(e["accused_example_ids"]), (name, e)                        # its own culprits among them
        assert read_ids(f"@{root / 'report' / 'report.json'}#{name}") == e["accused_example_ids"]
    pooled = {x["id"] for x in rep["examples"] if x.get("accused")}
    assert pooled == set(caps["capitals-a"]["attribution"]["accused_example_ids"]) | set(
        caps["capitals-b"]["attribution"]["accused_example_ids"])          # the pooled accusation is their union
    md = (root / "report" / "report.md").read_text()
    assert "## Which rows broke which capability" in md and "@report.json#<capability>" in md
    print({n: c["attribution"]["accused_example_ids"] for n, c in caps.items()})
