"""One regressed item with a degenerate contrast never stops the diagnosis of the others (issue 35, item 4).

A real tiny fine-tune (`gradian.testing.poisoned_finetune`) is analyzed twice: as it is, and with the tuned model's
generation replaced for two regressed items, one by a token prefix of its reference (the model stops a word early) and
one by nothing. Before, the first ended `analyze` with "query sequences with no supervised tokens"."""
import json

import numpy as np
import pytest

import gradian.evaluation as evaluation
from gradian.analyze import analyze
from gradian.evaluation import normalize_text
from gradian.testing import poisoned_finetune


@pytest.fixture(scope="module")
def finetune(tmp_path_factory):
    root = tmp_path_factory.mktemp("degenerate")
    ft = poisoned_finetune(root / "ft")
    ev = root / "eval.jsonl"
    ev.write_text("".join(json.dumps({"prompt": it.prompt, "answer": it.answers[0], "metric": it.metric,
                                      "capability": it.capability}) + "\n" for it in ft.items))
    return root, ft, ev


def _analyze(ft, ev, out):
    return analyze(ft.model, None, ft.examples, ev, out, cfg=ft.cfg, tokenizer=ft.tokenizer, log=None, progress=False)


def test_a_prefix_and_an_empty_generation_are_set_aside_and_the_others_diagnosed(finetune, monkeypatch):
    root, ft, ev = finetune
    reg = [i for c in ft.capabilities for i in c.regressed_items]
    assert len(reg) >= 4, "the fixture must regress several items"
    cut, blank = reg[0], reg[1]
    ref, tok = cut.answers[0], ft.tokenizer
    ids = tok(ref, add_special_tokens=False).input_ids
    prefix = tok.decode(ids[:-1])
    assert prefix.strip() and normalize_text(prefix) != normalize_text(ref) and ref.startswith(prefix)

    plain = _analyze(ft, ev, root / "plain")
    real, refs, odd = evaluation.generate, {i.prompt: i.answers[0] for i in ft.items}, {cut.prompt: prefix, blank.prompt: ""}
    def stops_early(model, tokenizer, prompts, **kw):          # the tuned model's wrong answers, two of them degenerate
        outs = real(model, tokenizer, prompts, **kw)
        return [odd[p] if p in odd and o.strip() != refs[p] else o for p, o in zip(prompts, outs)]
    monkeypatch.setattr(evaluation, "generate", stops_early)
    odd = _analyze(ft, ev, root / "odd")

    rep = json.loads((root / "odd" / "report.json").read_text())
    aside = {s["item"]: s for s in rep["provenance"]["query_set_aside"]}
    pairs = {p.item_id: p for p in odd.attribution.query.pairs}
    (cut_id,) = [k for k, p in pairs.items() if p.wrong == prefix]
    (blank_id,) = [k for k, p in pairs.items() if p.set_aside == "the tuned model generated nothing"]
    assert set(aside) == {cut_id, blank_id}, aside
    assert (aside[blank_id]["signal"], pairs[blank_id].wrong) == ("classic", None)          # the reference alone
    assert (aside[cut_id]["signal"], aside[cut_id]["form"]) == ("contrastive", "to the end of the answer")
    md = (root / "odd" / "report.md").read_text()
    assert "Items with a degenerate contrast:" in md and f"{blank_id} (the tuned model generated nothing" in md

    # every other regressed item is diagnosed exactly as without the two odd ones: same pair, same score column
    others = [k for k in pairs if k not in aside]
    assert len(others) == len(reg) - 2 and all(not pairs[k].set_aside and pairs[k].signal == "contrastive" for k in others)
    cols = lambda a: {l: a.attribution.scores.scores[:, j] for j, l in enumerate(a.attribution.scores.labels)
                      if l.split("@")[0] in others}
    c_odd, c_plain = cols(odd), cols(plain)
    assert c_odd.keys() == c_plain.keys() and len(c_odd) >= len(others)
    for l in c_odd:                                      # equal up to float noise (the batches of queries differ)
        np.testing.assert_allclose(c_odd[l], c_plain[l], rtol=1e-4, atol=1e-5 * np.abs(c_plain[l]).max(), err_msg=l)
    assert odd.verdict in ("attributed", "diffuse") and len(rep["examples"]) == len(ft.examples)
