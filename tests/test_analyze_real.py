"""The diagnosis end to end on the real embedded SmolLM2: planted-poison scenarios trained with the hf backend,
then `analyze`. The capital scenario (the demo's) runs in the default suite; two more fact families are `slow`."""
import json, subprocess, sys
from pathlib import Path

import numpy as np
import pytest

from gradian.analyze import analyze
from gradian.config import load_config
from gradian.demo import demo_truth, run_demo
from gradian.scenarios import FAMILIES, DemoSpec, build_scenario
from gradian.report import validate_report
from gradian.report import _flatten, md_escape

GRADIAN = str(Path(sys.executable).with_name("gradian"))


@pytest.fixture(scope="module")
def capital(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "capital"
    a, truth = run_demo(out, "capital", log=None, progress=False)
    return out, a, truth


def test_capital_scenario_is_attributed_to_the_planted_cluster(capital):
    out, a, truth = capital
    assert truth["uptake"] >= 0.15, truth                    # the poison was learned: otherwise the experiment proves nothing
    assert a.verdict == "attributed", a.report.lead
    assert truth["planted_cluster_rank"] == 1, truth
    assert truth["top_k_planted_share"] >= 0.8, truth
    assert truth["accused_precision"] >= 0.8, truth
    assert a.report.lead["kind"] == "cluster"


def test_report_shows_the_regressed_items_and_the_whole_ranking(capital):
    out, a, truth = capital
    rep = json.loads((out / "report" / "report.json").read_text())
    assert len(rep["examples"]) == a.index.n                  # the whole ranking is in report.json
    regressed = {i.id for c in a.capabilities for i in c.regressed_items}
    assert {r["id"] for r in rep["regressed_items"]} == regressed and all(r["tuned_output"] for r in rep["regressed_items"])
    md = (out / "report" / "report.md").read_text()
    n_accused = int(a.attribution.accused.sum())
    shown = max(20, n_accused + 10)                           # every accused example and a margin, at least 20
    assert f"## Most harmful examples (top {shown} of {a.index.n})" in md
    assert md.index("## Regressed items") < md.index("## Harmful clusters")


def test_second_rule_marks_only_rows_that_state_a_wrong_answer(capital):
    "The second rule's evidence on the real fine-tune: rows marked as teaching an item's wrong answer state it in their answer, and an example accused by it is marked in both reports."
    out, a, truth = capital
    att = a.attribution
    assert att.teaches.shape == att.scores.scores.shape
    from gradian.data import load_train
    wrong = {p.item_id: p.wrong[slice(*p.wrong_span)].strip(" .").lower() for p in att.query.pairs if p.wrong_span}
    answers = {e.id: e.text.lower() for e in load_train(next((out / "data").glob("train*.jsonl")))}
    for i, j in zip(*np.nonzero(att.teaches)):
        assert wrong[att.scores.labels[j].split("@")[0]] in answers[att.scores.ids[i]], (att.scores.ids[i], att.scores.labels[j])
    rep = json.loads((out / "report" / "report.json").read_text())
    marked = [e for e in rep["examples"] if e.get("teaches_wrong_answer")]
    assert all(e["accused"] for e in marked)
    assert att.teaches.any(), "the planted rows state the wrong capitals the tuned model gives"
    if marked: assert "‡ Accused by the second rule" in (out / "report" / "report.md").read_text()


def test_auto_chose_contrastive_and_classic_is_recorded(capital):
    out, a, truth = capital
    assert {p.signal for p in a.query.pairs} == {"contrastive"} and all(p.form == "minimal pair" for p in a.query.pairs)
    assert a.report.provenance["query_signal"].startswith("contrastive")
    sc = a.report.provenance["signal_comparison"]
    assert sc["classic_rank_of_leading_topic"] is not None and 1 <= sc["classic_rank_of_leading_topic"] <= sc["n_topics"]
    assert sc["chosen_mean_score_of_accused"] < 0
    md = (out / "report" / "report.md").read_text()
    assert "Under the **classic** query" in md


def test_report_schema_provenance_and_timings(capital):
    out, a, truth = capital
    rep = json.loads((out / "report" / "report.json").read_text())
    validate_report(rep)
    assert rep["verdict"] == "attributed" and rep["schema_version"]
    md = (out / "report" / "report.md").read_text()
    manifest = json.loads((out / "report" / "manifest.json").read_text())
    assert manifest == rep["provenance"]["manifest"]
    missing = [k for k, v in _flatten(manifest) if f"| {md_escape(k)} |" not in md]
    assert not missing, f"manifest fields absent from the report's provenance section: {missing[:10]}"
    for stage in ("load", "checks", "evaluate", "gate", "index", "query", "score", "cluster"):
        assert stage in rep["provenance"]["timings"], stage
    assert "report" in a.timings                      # the report stage ends after report.json is written: timed in the Analysis only
    # the demo's two long entries (124 supervised tokens each) are drilled into, and the report shows their span tables
    assert rep["spans"] and all(s["n_supervised"] >= 80 and len(s["spans"]) >= 5 for s in rep["spans"])
    assert all(sum(sp["rank"] == 1 for sp in s["spans"]) == 1 and np.isfinite(s["separation"]) for s in rep["spans"])
    assert "## Inside long examples: span drill-down" in md and "| score (sum) |" in md
    # each is drilled at the point of the fine-tune where its harm showed, and names the sentence that states the planted wrong
    # capital (with the finished adapter alone, that sentence scored as the most helpful span: nbs/25_query.spans.ipynb)
    wrong = {w for k, v, w in FAMILIES["capital"].facts}
    assert all(s["culprit"] and any(w in s["culprit"] for w in wrong) for s in rep["spans"]), [(s["culprit"], s["note"]) for s in rep["spans"]]
    assert (out / "report" / "figures" / "capability_deltas.png").stat().st_size > 1000
    assert (out / "report" / "figures" / "cluster_effects.png").stat().st_size > 1000
    assert md.startswith("# Gradian report: **ATTRIBUTED**")
    c0 = rep["clusters"][0]
    assert c0["rank"] == 1 and set(c0["accused_example_ids"]) <= set(c0["example_ids"]) and c0["exemplars"]
    assert rep["examples"][0]["score"] <= rep["examples"][-1]["score"]


def test_loglik_only_capability_is_stamped_proxy_and_not_attributed(capital, tmp_path):
    out, a, truth = capital
    rows = [dict(json.loads(l), metric="loglik", capability="capital-loglik") for l in (out / "data" / "eval.jsonl").read_text().splitlines()]
    ev = tmp_path / "eval_loglik.jsonl"; ev.write_text("".join(json.dumps(r) + "\n" for r in rows))
    b = analyze("embedded", out / "adapter", out / "data" / "train.jsonl", ev, tmp_path / "rep", log=None, progress=False)
    cap = json.loads((tmp_path / "rep" / "report.json").read_text())["capabilities"][0]
    assert cap["proxy_used"] is True and cap["metric"] == "loglik" and cap["gated"] is False
    assert b.verdict == "refused"
    assert any("proxy metric" in r["reason"] for r in b.report.refused)


def test_engines_selectable_and_named(capital, tmp_path):
    out, a, truth = capital
    cfg = load_config(None, ["engine.name=graddot", "data.max_seq_length=256"])
    b = analyze("embedded", out / "adapter", out / "data" / "train.jsonl", out / "data" / "eval.jsonl", tmp_path / "rep", cfg=cfg,
                index=out / "report" / "index", log=None, progress=False)
    assert b.report.provenance["engine"]["engine"] == "graddot" and b.timings["index"] < 30      # reused, not rebuilt
    assert "graddot" in (tmp_path / "rep" / "report.md").read_text()
    assert b.verdict == "attributed"


@pytest.mark.slow
def test_ekfac_engine_on_the_real_fine_tune(capital, tmp_path):
    "EK-FAC (kronfluence) end to end on the demo's real fine-tune, its index reused: it finds the planted rows, and the report carries its rank correlation with datainf."
    out, a, truth = capital
    cfg = load_config(None, ["engine.name=ekfac", "engine.normalize=l2", "data.max_seq_length=256", "index.path_scale=null"])
    b = analyze("embedded", out / "adapter", out / "data" / "train.jsonl", out / "data" / "eval.jsonl", tmp_path / "rep", cfg=cfg,
                index=out / "report" / "index", log=None, progress=False)
    t = demo_truth(b, build_scenario(DemoSpec("capital", n_long=2)).neutral())      # the ids the demo wrote
    agree = b.report.provenance["engine_agreement"]
    print("ekfac on the demo fine-tune:", json.dumps(t), json.dumps(agree), json.dumps(b.timings))
    assert b.report.provenance["engine"]["engine"] == "ekfac" and b.verdict == "attributed"
    assert t["top_k_planted_share"] >= 0.6 and t["accused_precision"] >= 0.75, t
    assert set(agree) == {"datainf", "graddot", "repsim"} and agree["datainf"]["spearman"] >= 0.5, agree
    assert "Agreement with **datainf**" in (tmp_path / "rep" / "report.md").read_text()
    assert list((out / "report" / "index" / "ekfac").glob("factors-*/args.json"))      # the factors sit beside the index with their arguments


def test_bad_inputs_exit_2(capital, tmp_path):
    out, a, truth = capital
    empty = tmp_path / "empty.jsonl"; empty.write_text("")
    r = subprocess.run([GRADIAN, "analyze", "--model", "embedded", "--adapter", out / "adapter", "--data", out / "data" / "train.jsonl",
                        "--eval", empty, "--out", tmp_path / "x"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "no eval items" in r.stderr and "Traceback" not in r.stderr


def _run_family(family, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / family
    a, truth = run_demo(out, family, log=None, progress=False)
    print(family, json.dumps(truth))
    return a, truth


@pytest.mark.slow
@pytest.mark.parametrize("family", ["opposite", "language"])
def test_other_fact_families_with_on_topic_decoys(family, tmp_path_factory):
    a, truth = _run_family(family, tmp_path_factory)
    assert truth["uptake"] >= 0.15, truth
    assert a.verdict == "attributed", (a.report.lead, truth)
    assert truth["planted_cluster_rank"] == 1, truth
    assert truth["accused_precision"] >= 0.8, truth
    assert truth["auc_planted_vs_decoy"] >= 0.9, truth


@pytest.fixture(scope="module")
def truncated(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "truncated"
    a, truth = run_demo(out, "capital", truncate_planted=True, log=None, progress=False)
    return out, a, truth


@pytest.mark.slow          # a second demo fine-tune (4 minutes); the defect checks and the lead rule are tested by default in test_cli_check, nbs/17_analyze and experiment B
def test_truncated_plant_leads_with_the_data_defect(truncated):
    out, a, truth = truncated
    rep = json.loads((out / "report" / "report.json").read_text())
    by = {f["check_id"]: f for f in rep["findings"]}
    planted = set(build_scenario(DemoSpec("capital", truncate_planted=True)).neutral().ids("planted"))
    assert set(by["data.completion_truncated"]["example_ids"]) == planted and by["data.completion_truncated"]["count"] == len(planted)
    assert by["config.max_seq_length_vs_data"]["count"] == len(planted)
    x = by["attribution.cluster_matches_data_defect"]
    assert set(x["example_ids"]) <= planted and len(x["example_ids"]) >= 2
    assert rep["verdict"] == "attributed" and rep["lead"]["kind"] == "data_defect"
    md = (out / "report" / "report.md").read_text()
    assert f"**Leading cause:** {md_escape('data defect data.completion_truncated')}" in md.split("## Capabilities")[0]


def test_clean_finetune_is_refused(tmp_path):
    from gradian.model.training import train_adapter
    sc = build_scenario(DemoSpec("capital", n_clean=48))
    sc.train = [r for r in sc.train if r["meta"]["truth"] != "planted"]          # the same fine-tune without the poison
    train_p, eval_p = sc.write(tmp_path / "data")
    train_adapter(train_p, tmp_path / "adapter", model="embedded", backend="hf", max_seq_length=256, log=None, lr=1e-3, epochs=2.0, r=8, alpha=16, seed=0)
    a = analyze("embedded", tmp_path / "adapter", train_p, eval_p, tmp_path / "report", log=None, progress=False)
    assert a.verdict == "refused", a.report.summary
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    assert rep["refused"] and rep["refused"][0]["claim"].startswith("capability 'capital'")
    assert "no significant regression" in rep["refused"][0]["reason"]
    assert rep["clusters"] == [] and not (tmp_path / "report" / "index").exists()       # nothing is computed for a claim it will not make
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.startswith("# Gradian report: **REFUSED**") and "## What Gradian does not claim" in md and "no significant regression" in md


def test_adapter_of_another_base_is_refused(tmp_path, smol_tokenizer):
    "Same shape, other weights: refused through the base fingerprint in train_manifest.json; other shape: refused by PEFT's load."
    from gradian.model.training import train_adapter
    from gradian.testing import tiny_llama
    for name, seed in (("base_a", 0), ("base_b", 1)):
        tiny_llama(smol_tokenizer, seed, tie_word_embeddings=True).save_pretrained(tmp_path / name); smol_tokenizer.save_pretrained(tmp_path / name)
    sc = build_scenario(DemoSpec("capital", n_clean=16))
    train_p, eval_p = sc.write(tmp_path / "data")
    train_adapter(train_p, tmp_path / "adapter", model=tmp_path / "base_a", backend="hf", max_seq_length=64, log=None, max_steps=2, r=4, seed=0)
    for base, msg in ((tmp_path / "base_b", "trained on another base model"), ("embedded", "does not fit base model")):
        r = subprocess.run([GRADIAN, "analyze", "--model", base, "--adapter", tmp_path / "adapter", "--data", train_p, "--eval", eval_p,
                            "--out", tmp_path / "rep"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_provenance_shows_the_adapters_real_training_settings(capital):
    "The demo's adapter is trained at the bank's rate (1e-3), not the config's default (2e-4): the report says 1e-3."
    out, a, truth = capital
    from gradian.config import GradianConfig
    from gradian.scenarios import DEMO_TRAINING
    trained = json.loads(next(out.rglob("train_manifest.json")).read_text())["training"]
    assert trained["lr"] == DEMO_TRAINING["lr"] != GradianConfig().training.lr
    run = json.loads((out / "report" / "report.json").read_text())["provenance"]["manifest"]["analysis"]
    assert run["adapter_training"]["known"] and run["adapter_training"]["lr"] == trained["lr"]
    assert "training" not in run["config"]                    # the config's unused defaults are not stamped
    md = (out / "report" / "report.md").read_text()
    assert f"| {md_escape('analysis.adapter_training.lr')} | {trained['lr']:.4g} |" in md and "analysis.config.training" not in md
