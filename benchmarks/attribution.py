#!/usr/bin/env python
"""Attribution on fine-tunes nobody tuned the method for: the scenario bank through `analyze`, measured against each answer key.

    python benchmarks/attribution.py [--scenarios a,b | --quick] [--work DIR] [--no-variants] [--retrain [--no-oracle]] [--offline] [--set KEY=VALUE]
    python benchmarks/attribution.py --train-only [--scenarios a,b]      (adapters ahead of a run, e.g. over several sittings)

Each scenario of `gradian.scenarios` (planted poison in eight fact families, three answer forms, 5-20% poison shares, several
decoy kinds; behaviour drifts (over-refusal, a verbose preamble, French answers, a list) with same-form decoys, in a dev and a held-out
half; and three controls) is written, trained on the embedded model with the demo's LoRA settings (adapters are cached
in --work by the scenario's spec, so a rerun only re-analyzes), and diagnosed by `analyze` under the default config. The
answer key is read only here, after `analyze` has returned.

Printed: per scenario base, tuned, delta and its CI, uptake of the planted answers, the verdict, accused-set precision and
recall, precision@k of the ranking (k = number of culprits), AUPRC, AUC culprits-vs-decoys and wall time; then the medians
and worst cases over the planted scenarios, whether the controls stayed unblamed, and the same metrics for each variant
(other engines and the classic signal, scored from the same index and queries). `--retrain` retrains each planted scenario
without its accused set, without 5 random sets of the same size and without all its culprits (the answer key's removal, the
ceiling any accused set can reach), and reports the share of the regression each recovers; with `--offline --retrain` the
accused sets come from the scores a previous run saved, so the retraining table grows without re-running `analyze`.
Everything is written to benchmarks/results/attribution-<stamp>.json."""
import argparse, json, shutil, statistics, sys, time
from pathlib import Path

import numpy as np

from gradian.analyze import analyze
from gradian.attribution import blame, teaches_columns, teaches_wrong_answer
from gradian.cluster import blamed_cluster
from gradian.config import EngineConfig, load_config
from gradian.core import stable_hash
from gradian.engines import Engine
from gradian.evaluation import uptake
from gradian.query.scorer import InfluenceScores, score_index
from gradian.scenarios import BANK, BEHAVIOURS, CONTROLS, DEMO_TRAINING, SCENARIOS, build_scenario, truth_metrics
from gradian.experiments import long_ranks

QUICK = ["currency-sentence", "author-sentence-reverse", "continent-word", "control-clean-currency"]
GOALS = dict(precision_at_k=(0.85, 0.6), accused_precision=(0.9, 0.75), accused_recall=(0.7, 0.5), auc_culprit_vs_decoy=(0.9, None))   # (median, worst)
MSL = 256


def train(spec, sc, d: Path, drop=(), tag="adapter", extra=()):
    """Train the embedded model on the scenario (without the ids in `drop`, with the rows `extra` added), cached by rows and
    settings: (adapter, seconds or None when reused)."""
    from gradian.model.training import train_adapter
    tr = {**DEMO_TRAINING, **dict(spec.training)}
    rows = [r for r in sc.train if r["id"] not in set(drop)] + list(extra)
    stamp = stable_hash(json.dumps([rows, tr, MSL], sort_keys=True, default=str))      # the rows themselves: a changed generator retrains
    out = d / tag
    if (out / "bench_stamp").exists() and (out / "bench_stamp").read_text() == stamp: return out, None       # None: reused
    data = d / f"{tag}.train.jsonl"; data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t0 = time.perf_counter()
    train_adapter(data, out, model="embedded", backend="hf", max_seq_length=MSL, overwrite=True, progress=False, log=None, **tr)
    (out / "bench_stamp").write_text(stamp)
    return out, time.perf_counter() - t0


def train_all(names, work: Path) -> dict:
    "Each scenario's adapter trained, or found finished (same rows and settings), in turn; {name: training seconds, None when reused}."
    done = {}
    for n in names:
        spec = SCENARIOS[n]; sc = build_scenario(spec); sc.write(work / n / "data")
        done[n] = train(spec, sc, work / n)[1]
        print(f"[train] {n}: " + (f"trained in {done[n]:.0f} s" if done[n] is not None else "finished adapter reused"), flush=True)
    return done


def teach_mask(a, sc) -> tuple:
    "The second rule's evidence of an analysis, per query pair: (examples x pairs mask, the pairs' item ids)."
    from gradian.data import Example, row_to_messages
    att, rows = a.attribution, {r["id"]: r for r in sc.train}
    ex = [Example(i, row_to_messages(rows[i], {})) for i in att.index.ids]
    return teaches_wrong_answer(ex, att.query.pairs), [p.item_id for p in att.query.pairs]


def pairs_from_report(n, work: Path, report: str = None):
    """The minimal pairs of scenario `n` rebuilt from its saved report's regressed items and tuned answers with the scenario's
    adapter, as `analyze` builds them: (pairs, model, tokenizer), or None without a saved report."""
    from gradian.data import load_eval
    from gradian.model.core import load_model
    from gradian.query.signals import query_pairs_for
    rep = work / n / (report or f"report{_suffix()}") / "report.json"
    if not rep.exists(): return None
    reg = json.loads(rep.read_text()).get("regressed_items") or []
    if not reg: return None
    ev = {i.id: i for i in load_eval(work / n / "data" / "eval.jsonl")}; cfg = load_config(None)
    m, tok = load_model("embedded", work / n / "adapter")
    pairs = query_pairs_for([ev[r["id"]] for r in reg], cfg.evaluation.query_signal, {r["id"]: r["tuned_output"] for r in reg}, m, tok,
                            minimal=cfg.evaluation.minimal_pair, margin=cfg.evaluation.minimal_pair_margin)
    return pairs, m, tok


def teach_from_report(n, work: Path):
    """The second rule's evidence for scores saved before it existed: `teaches_wrong_answer` over the minimal pairs
    rebuilt from the saved report (`pairs_from_report`). None without a report."""
    from gradian.data import Example, row_to_messages
    got = pairs_from_report(n, work)
    if got is None: return None
    pairs = got[0]
    sc, ids = build_scenario(SCENARIOS[n]), [str(i) for i in np.load(work / n / f"scores{_suffix()}.npz")["ids"]]
    rows = {r["id"]: r for r in sc.train}
    return teaches_wrong_answer([Example(i, row_to_messages(rows[i], {})) for i in ids], pairs), [p.item_id for p in pairs]


def _columns(teach, labels):
    if teach is None: return None
    mask, items = teach
    return teaches_columns(mask, items, labels)


def judged(sc, scores, clustering, cfg, accused_from="all", teach=None) -> dict:
    """Truth metrics of `blame` on `scores` under `cfg`. `accused_from`: 'all' (analyze's rule: every accused example once a cluster
    is blamed), 'blamed clusters' (only the members of the Holm-blamed clusters), 'first blamed cluster', or 'uncorrected first cluster'
    (the rule before the Holm correction: the first cluster whose accused members pass at alpha, and only its members).
    `teach`: the second rule's evidence (`teach_mask`), laid out on the columns of `scores`."""
    b = blame(scores, clustering, cfg, _columns(teach, scores.labels)); alpha = cfg.cluster.alpha
    if accused_from == "all": acc, blamed = [scores.ids[i] for i in np.flatnonzero(b.accused)], bool(b.blamed)
    elif accused_from == "uncorrected first cluster":
        top = next((c for c in b.clusters if c.score < 0 and c.accused_example_ids and c.harm_p < alpha), None)
        acc, blamed = (top.accused_example_ids if top else []), top is not None
    else:
        cs = b.blamed[:1] if accused_from == "first blamed cluster" else b.blamed
        acc, blamed = [i for c in cs for i in c.accused_example_ids], bool(cs)
    harm = {i: -float(z) for i, z in zip(scores.ids, b.strength)}
    return dict(verdict="attributed" if blamed else "diffuse", recall_ceiling=recall_ceiling(sc, harm),
                **truth_metrics(sc, [scores.ids[i] for i in b.order], acc, harm))


def recall_ceiling(sc, harm: dict, precision=0.9):
    """The most recall any accusation threshold on this ranking (strongest per-item z) could reach while keeping accused precision
    >= `precision`: whether a short recall is the threshold's fault (ceiling high) or the ranking's (ceiling low)."""
    C = set(sc.culprits)
    if not C or not harm: return None
    hit = np.array([i in C for i in sorted(harm, key=lambda i: -harm[i])]); tp = np.cumsum(hit)
    ok = tp / np.arange(1, len(hit) + 1) >= precision
    return float(tp[ok].max() / len(C)) if ok.any() else 0.0


def diagnosis(a, sc, cfg, scores=None, teach=None) -> dict:
    "Truth metrics of the analysis (or of other `scores` from the same index and queries) under the one accusation rule."
    att = a.attribution
    if att is None: return dict(verdict=a.verdict, **truth_metrics(sc, [], [], {}))
    row = judged(sc, scores if scores is not None else att.scores, att.clustering, cfg, teach=teach if teach is not None else teach_mask(a, sc))
    if scores is None: row["verdict"] = a.verdict          # analyze's own verdict (a data-defect lead included)
    return row


RULES = {"second rule off": ["cluster.teach_z=null"], "teach_z=4": ["cluster.teach_z=4"], "accuse_z=3.5": ["cluster.accuse_z=3.5"], "accuse_z=4": ["cluster.accuse_z=4"], "accuse_z=5": ["cluster.accuse_z=5"], "accuse_z=6": ["cluster.accuse_z=6"], "accuse_frac=0.25": ["cluster.accuse_frac=0.25"],
         "accuse_z=5,frac=0.25": ["cluster.accuse_z=5", "cluster.accuse_frac=0.25"]}
ACCUSED_FROM = ("blamed clusters", "first blamed cluster", "uncorrected first cluster")


SETTINGS: list = []        # --set overrides: every diagnosis of this run is made under them (reports and scores kept apart)


def _suffix() -> str: return "" if not SETTINGS else "-" + "-".join(s.replace("=", "_") for s in SETTINGS)


def _rule(sc, scores, clustering, overrides=(), **kw) -> dict:
    return judged(sc, scores, clustering, load_config(None, [f"data.max_seq_length={MSL}", *SETTINGS, *overrides]), **kw)


def rule_variants(sc, scores, clustering, teach=None) -> dict:
    "The default engine's scores under other accusation rules (`blame` with other `cluster.*` settings), and accused sets taken other ways."
    out = {f"rule:{name}": _rule(sc, scores, clustering, ov, teach=teach) for name, ov in RULES.items()}
    out.update({f"rule:accused from {a}": _rule(sc, scores, clustering, accused_from=a, teach=teach) for a in ACCUSED_FROM})
    return out


def variants(a, sc, cfg) -> dict:
    "The same diagnosis scored by the other engines, and under other accusation rules, from the same index and queries."
    att, out = a.attribution, {}
    if att is None: return out
    out.update(rule_variants(sc, att.scores, att.clustering, teach_mask(a, sc)))
    S, m = att.scores, len(att.query.pairs)
    if S.scores.shape[1] > m:                               # the two points of the fine-tune, each alone
        for name, cols in (("tuned model only", slice(0, m)), ("midpoint only", slice(m, None))):
            out[f"path:{name}"] = diagnosis(a, sc, cfg, InfluenceScores(S.ids, S.scores[:, cols], S.labels[cols], S.engine, S.query))
    for name in ("graddot", "repsim"):
        if name == att.engine.name: continue
        eng = Engine.from_config(EngineConfig(**{**cfg.engine.__dict__, "name": name}))
        out[f"engine={name}"] = diagnosis(a, sc, cfg, score_index(att.index, att.query, eng))
    return out


def span_check(sc, spans) -> dict:
    """The drill-down against the key: for each drilled culprit (planted row), whether it names the planted sentence or says
    inconclusive; for each drilled long entry that states a correct fact (the mirror case), which sentence it names, if any."""
    wrong = set(sc.planted_answers.values()); rows, correct = [], []
    for s in spans:
        kind, named = sc.key.get(s["example_id"]), s.get("culprit")
        if kind == "decoy_long": correct.append(dict(example=s["example_id"], culprit=named, separation=round(s["separation"], 2)))
        if kind not in ("planted", "planted_long"): continue
        rows.append(dict(example=s["example_id"], kind=kind, culprit=named, separation=round(s["separation"], 2),
                         ok=named is None or any(w in named for w in wrong)))
    return dict(long_culprits=len(sc.ids("planted_long")), drilled_culprits=len(rows), named_planted=sum(r["ok"] and r["culprit"] is not None for r in rows),
                inconclusive=sum(r["culprit"] is None for r in rows), wrong=sum(not r["ok"] for r in rows), rows=rows,
                drilled_correct_long=len(correct), named_in_correct_long=sum(c["culprit"] is not None for c in correct), correct_rows=correct)


def span_line(rows) -> str:
    "One line over the bank: drilled planted rows, how many name the planted sentence, say inconclusive, or name another sentence."
    sp = [r["spans"] for r in rows if r.get("spans")]
    tot = {k: sum(x.get(k, 0) for x in sp) for k in ("long_culprits", "drilled_culprits", "named_planted", "inconclusive", "wrong",
                                                        "drilled_correct_long", "named_in_correct_long")}
    return (f"span drill-down over {len(sp)} scenarios ({tot['long_culprits']} long planted entries): {tot['drilled_culprits']} planted rows drilled, "
            f"{tot['named_planted']} name the planted sentence, {tot['inconclusive']} inconclusive, {tot['wrong']} name another sentence; "
            f"{tot['drilled_correct_long']} long entries stating a correct fact drilled, {tot['named_in_correct_long']} of them with a sentence named")


def per_capability(a, sc, cfg) -> dict:
    """Several causes: each planted capability's own diagnosis against its own culprits (analyze's accused set for it, the ranking
    by its own strength), whether the gate passed it, and the share of its accused that break another capability."""
    from gradian.attribution import blame_by_capability, capability_columns
    att, gated = a.attribution, {d.capability: d.gated for d in a.decisions}
    caps, out = (sc.capability, *sc.spec.also), {}
    if att is not None:               # each capability's ranking (analyze keeps only its accused set)
        S = att.scores; cols = capability_columns(att.query.pairs, S.scores.shape[1], {i.id: c.name for c in a.capabilities for i in c.items})
        per = blame_by_capability(S, att.clustering, cfg, _columns(teach_mask(a, sc), S.labels), {c: cols[c] for c in caps if c in att.by_capability})
    for cap in caps:
        e = att.by_capability.get(cap) if att is not None else None
        if e is None: out[cap] = dict(gated=gated.get(cap, False), verdict="refused", **truth_metrics(sc, [], [], {}, capability=cap)); continue
        b = per[cap]
        out[cap] = dict(gated=True, verdict=e["verdict"], n_helps_elsewhere=len(e["helps_elsewhere"]),
                        **truth_metrics(sc, [S.ids[i] for i in b.order], e["accused_example_ids"], {i: -float(z) for i, z in zip(S.ids, b.strength)}, capability=cap))
    return out


def capability_row(a, sc) -> dict:
    c = next(c for c in a.capabilities if c.name == sc.capability)
    planted_items = [i for i in c.items if i.id in sc.planted_answers]
    out = dict(base=c.base, tuned=c.tuned, delta=c.delta, ci=[c.ci_low, c.ci_high], n_items=c.n,
               uptake=uptake(planted_items, sc.planted_answers) if planted_items else None)
    others = [dict(name=o.name, delta=o.delta, ci=[o.ci_low, o.ci_high]) for o in a.capabilities if o.name != sc.capability]
    if others: out["other_capabilities"] = others
    return out


def removal(spec, sc, d, drop, tag, items, c, cap=None, others=None, extra=()) -> dict:
    """Retrain the scenario without the ids in `drop` (cached as `retrain-<tag>`) and evaluate `items`: the tuned level of `cap`
    (default: the scenario's capability), its delta from `c.base`, the share of `c.delta` the removal recovers, and how many
    culprits it removed; with `others` ({capability: levels}), the share each other capability recovers; `extra`: rows added."""
    from gradian.evaluation import evaluate
    from gradian.model.core import load_model
    ad, secs = train(spec, sc, d, drop, tag=f"retrain-{tag}", extra=extra)
    m, tok = load_model("embedded", ad)
    res = {r.name: r for r in evaluate(m, tok, items, load_config(None).evaluation, max_seq_length=MSL)}
    tuned = res[cap or sc.capability].tuned
    delta = tuned - c.base
    out = dict(tuned=tuned, delta=delta, recovered=1 - delta / c.delta if c.delta else None,
               culprits_removed=len(set(drop) & set(sc.culprits if cap is None else sc.culprits_of(cap))), n_removed=len(drop))
    if others: out["others"] = {n: 1 - (res[n].tuned - o.base) / o.delta if o.delta else None for n, o in others.items()}
    return out


def mix_check(spec, sc, d, c, share=1 / 3) -> dict:
    """Diffuse ground truth: retrain with general rows mixed in (one for every three of the scenario's, correct varied material
    from `clean_pool`, never the evaluated families) and measure the share of the regression that comes back."""
    from gradian.data import load_eval
    from gradian.families import _msg
    from gradian.scenarios import clean_pool
    general = [{"id": f"general-{i:04d}", "messages": _msg(q, a)}
               for i, (q, a) in enumerate(clean_pool(round(share * len(sc.train)), spec.seed + 1000, (spec.family, spec.second)))]
    items = [i for i in load_eval(d / "data" / "eval.jsonl") if i.capability == sc.capability]
    return dict(n_general=len(general), **removal(spec, sc, d, (), "mixed", items, c, extra=general))


def retrain_check(spec, sc, d, accused, c, n_random=5, oracle=True, cap=None, others=None) -> dict:
    """Retrain without the accused set and without random sets of the same size; the share of the regression each recovers.
    `c`: the capability's levels before removal (`.base`, `.delta`: a `CapabilityResult` or a namespace from a saved row).
    Several causes: `cap` is the capability whose accused set is removed, `others` the levels of the other planted ones."""
    from gradian.data import load_eval
    if not accused: return dict(skipped="nothing accused")
    cap = cap or sc.capability; culprits = sc.culprits_of(cap)
    items = [i for i in load_eval(d / "data" / "eval.jsonl") if i.capability == cap or i.capability in (others or {})]
    rng = np.random.default_rng(spec.seed)
    tagged = lambda t: t if cap == sc.capability else f"{cap}-{t}"          # one cache entry per capability's removals
    drops = {"accused": list(accused)} | {f"random{j}": list(rng.choice([r["id"] for r in sc.train], len(accused), replace=False)) for j in range(n_random)}
    if oracle and set(culprits) != set(accused): drops["culprits"] = list(culprits)   # the answer key's removal: the most any accused set could recover
    out = {tag: removal(spec, sc, d, drop, tagged(tag), items, c, cap, others) for tag, drop in drops.items()}
    if oracle and "culprits" not in out: out["culprits"] = out["accused"]      # the accused set is exactly the culprits
    rand = [v["recovered"] for k, v in out.items() if k.startswith("random")]
    out["accused_rank"] = 1 + sum(r >= out["accused"]["recovered"] for r in rand)
    out["removal_precision"] = out["accused"]["culprits_removed"] / len(accused)
    return out


def run(name, work: Path, want_variants=True, retrain=False, log=print, oracle=True) -> dict:
    spec = SCENARIOS[name]; sc = build_scenario(spec); d = work / name
    train_p, eval_p = sc.write(d / "data")
    t0 = time.perf_counter()
    adapter, t_train = train(spec, sc, d)
    cfg = load_config(None, [f"data.max_seq_length={MSL}", *SETTINGS])
    t1 = time.perf_counter()
    rep = d / f"report{_suffix()}"
    shutil.rmtree(rep, ignore_errors=True)                 # a fresh diagnosis every run (the index is built under today's settings)
    a = analyze("embedded", adapter, train_p, eval_p, rep, cfg=cfg, log=None, progress=False)
    row = dict(scenario=name, kind=spec.control or ("several" if getattr(spec, "also", ()) else getattr(spec, "behaviour", "planted")), half=getattr(spec, "half", "dev"), n_train=len(sc.train), **capability_row(a, sc), **diagnosis(a, sc, cfg),
               train_s=round(t_train or 0.0, 1), analyze_s=round(time.perf_counter() - t1, 1), timings=a.timings)
    row["gated"] = [d_.capability for d_ in a.decisions if d_.gated]
    if getattr(spec, "also", ()):
        row["per_capability"] = per_capability(a, sc, cfg)
        row["untouched_refused"] = not any(d_.gated for d_ in a.decisions if d_.capability == spec.second)
    row["spans"] = span_check(sc, a.report.spans)
    if a.attribution is not None and (sc.ids("planted_long") or sc.ids("decoy_long")):
        row["long_entries"] = {k: long_ranks(a, sc, k) for k in ("planted_long", "decoy_long") if sc.ids(k)}
    if a.attribution is not None:                         # per-item scores for offline study of accusation rules
        att = a.attribution
        tm, tp = teach_mask(a, sc)
        np.savez_compressed(d / f"scores{_suffix()}.npz", scores=att.scores.scores, ids=np.array(att.index.ids), items=np.array(att.scores.labels),
                            clusters=att.clustering.labels, culprit=np.array([i in set(sc.culprits) for i in att.index.ids]),
                            teaches=tm, teach_items=np.array(tp))
    if want_variants and a.attribution is not None:
        row["variants"] = variants(a, sc, cfg)
        row["signal_comparison"] = a.report.provenance.get("signal_comparison", {})
    levels = {c.name: c for c in a.capabilities}
    if retrain and spec.control is None and getattr(spec, "also", ()):     # each capability's own accused set, the others watched
        caps = (sc.capability, *spec.also)
        row["retrain_per_capability"] = {
            c: retrain_check(spec, sc, d, a.attribution.by_capability.get(c, {}).get("accused_example_ids", []) if a.attribution else [],
                             levels[c], oracle=oracle, cap=c, others={o: levels[o] for o in caps if o != c}) for c in caps}
    elif retrain and spec.control in ("degrade", "narrow") and a.attribution is not None:
        row["retrain_mixed"] = mix_check(spec, sc, d, levels[sc.capability])
    elif retrain and spec.control is None:
        acc = [a.index.ids[i] for i in np.flatnonzero(a.attribution.accused)] if a.verdict == "attributed" else []
        row["retrain"] = retrain_check(spec, sc, d, acc, levels[sc.capability], oracle=oracle)
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    return row


def _f(x, nd=2): return "  -  " if x is None else (f"{x:+.{nd}f}" if isinstance(x, float) and x < 0 else f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def table(rows) -> str:
    head = f"{'scenario':28s} {'base':>5s} {'tuned':>5s} {'delta':>6s} {'CI':>15s} {'uptake':>6s} {'verdict':>12s} {'acc.P':>5s} {'acc.R':>5s} {'P@k':>5s} {'AUPRC':>5s} {'AUCdec':>6s} {'wall s':>6s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        ci = f"[{r['ci'][0]:+.2f},{r['ci'][1]:+.2f}]"
        lines.append(f"{r['scenario']:28s} {r['base']:5.2f} {r['tuned']:5.2f} {r['delta']:+6.2f} {ci:>15s} {_f(r.get('uptake')):>6s} {r['verdict']:>12s} "
                     f"{_f(r.get('accused_precision')):>5s} {_f(r.get('accused_recall')):>5s} {_f(r.get('precision_at_k')):>5s} {_f(r.get('auprc')):>5s} "
                     f"{_f(r.get('auc_culprit_vs_decoy')):>6s} {r['wall_s']:6.0f}")
        for c, m in (r.get("per_capability") or {}).items():      # several causes: each capability against its own culprits
            lines.append(f"  {c:26s} {'gated' if m['gated'] else 'not gated':>38s} {m['verdict']:>12s} {_f(m.get('accused_precision')):>5s} "
                         f"{_f(m.get('accused_recall')):>5s} {_f(m.get('precision_at_k')):>5s} {_f(m.get('auprc')):>5s} "
                         f"{_f(m.get('auc_culprit_vs_decoy')):>6s}   other capability's culprits among accused {_f(m.get('accused_other_share'))}")
        if "untouched_refused" in r: lines.append(f"  untouched capability refused by the gate: {r['untouched_refused']}")
    return "\n".join(lines)


def summary(rows) -> dict:
    "Medians and worst cases over the planted scenarios (a planted scenario with nothing accused counts as precision 0), controls blamed or not."
    planted = [r for r in rows if r["kind"] == "planted"]
    out = {}
    for m, (goal_med, goal_worst) in GOALS.items():
        vals = [r.get(m) if r.get(m) is not None else 0.0 for r in planted]
        if not vals: continue
        med, worst = statistics.median(vals), min(vals)
        out[m] = dict(median=med, worst=worst, goal_median=goal_med, goal_worst=goal_worst,
                      met=med >= goal_med and (goal_worst is None or worst >= goal_worst))
    ctrl = [r for r in rows if r["kind"] in ("clean", "degrade", "narrow")]     # behaviour rows are neither planted facts nor controls
    out["controls_unblamed"] = {r["scenario"]: r["verdict"] != "attributed" for r in ctrl}
    return out


def _kind_group(r) -> str:
    "fact, behaviour, several (one entry per planted capability) or diffuse (an erosion with no culprit group), / half."
    k = {"planted": "fact", "several": "several", "degrade": "diffuse", "narrow": "diffuse"}.get(r["kind"], "behaviour")
    return f"{k}/{r.get('half', 'dev')}"


def by_kind(rows) -> dict:
    """Medians and worst cases per kind of regression (fact: a planted wrong fact; behaviour: refusal and the like; several: each
    capability of a fine-tune with several causes, scored against its own culprits; diffuse: verdicts) and per half of the bank
    (dev: rules may be tuned on it; held: only scored), with the largest share of same-form decoys among the accused."""
    groups = {}
    for r in rows:
        if r["kind"] == "clean": continue
        entries = [{**m, "scenario": f"{r['scenario']}:{c}"} for c, m in r["per_capability"].items()] if r.get("per_capability") else [r]
        groups.setdefault(_kind_group(r), []).extend(entries)
    out = {}
    for g, rs in sorted(groups.items()):
        d = dict(n=len(rs), scenarios=[r["scenario"] for r in rs])
        if g.startswith("diffuse"):           # the goal: `diffuse` everywhere, never one blamed cluster
            d["verdicts"] = {r["scenario"]: r["verdict"] for r in rs}
            d["diffuse"] = dict(n=sum(r["verdict"] == "diffuse" for r in rs), met=all(r["verdict"] == "diffuse" for r in rs))
            out[g] = d; continue
        for m, (goal_med, goal_worst) in GOALS.items():
            vals = [r.get(m) if r.get(m) is not None else 0.0 for r in rs]
            med, worst = statistics.median(vals), min(vals)
            d[m] = dict(median=med, worst=worst, met=med >= goal_med and (goal_worst is None or worst >= goal_worst))
        ceil = [r["recall_ceiling"] for r in rs if r.get("recall_ceiling") is not None]
        if ceil: d["recall_ceiling"] = dict(median=statistics.median(ceil), worst=min(ceil))
        shares = [r["accused_decoy_share"] for r in rs if r.get("accused_decoy_share") is not None]
        d["accused_decoy_share"] = dict(worst=max(shares) if shares else None, met=all(x <= 0.1 for x in shares))
        if g.startswith("several"):           # another capability's culprits among the accused, and untouched capabilities
            other = [r["accused_other_share"] for r in rs if r.get("accused_other_share") is not None]
            d["accused_other_share"] = dict(worst=max(other) if other else None, met=all(x <= 0.1 for x in other))
        out[g] = d
    return out


def kind_table(rows) -> str:
    "`by_kind` as lines: each metric's median / worst, and whether its goal is met."
    lines = []
    for g, d in by_kind(rows).items():
        if "diffuse" in d:
            lines.append(f"{g:16s} n={d['n']:<3d} diffuse in {d['diffuse']['n']} of {d['n']}{'' if d['diffuse']['met'] else ' (NOT met)'}: "
                         + ", ".join(f"{k} {v}" for k, v in d["verdicts"].items())); continue
        ms = "; ".join(f"{m} {v['median']:.2f}/{v['worst']:.2f}{'' if v['met'] else ' (NOT met)'}" for m, v in d.items() if m in GOALS)
        dec = d["accused_decoy_share"]
        lines.append(f"{g:16s} n={d['n']:<3d} {ms}; same-form decoys among accused, worst {_f(dec['worst'])}{'' if dec['met'] else ' (NOT met)'}"
                     + (f"; recall ceiling at precision 0.9 {d['recall_ceiling']['median']:.2f}/{d['recall_ceiling']['worst']:.2f}"
                        if "recall_ceiling" in d else "")
                     + (f"; another capability's culprits among accused, worst {_f(d['accused_other_share']['worst'])}"
                        f"{'' if d['accused_other_share']['met'] else ' (NOT met)'}" if "accused_other_share" in d else ""))
    return "\n".join(lines)


def offline(names, work: Path, retrain=False, last=None, oracle=True) -> list:
    """Rule variants recomputed from the per-item scores a previous run saved (scores.npz): no model, seconds per scenario.
    With `retrain`, each planted scenario the default rule attributes is retrained without its accused set (and random sets),
    against the levels of its newest saved row in `last`."""
    from gradian.cluster import Clustering
    from gradian.query.scorer import InfluenceScores
    rows = []
    for n in names:
        f = work / n / f"scores{_suffix()}.npz"
        if not f.exists(): continue
        d, sc = np.load(f), build_scenario(SCENARIOS[n])
        S = InfluenceScores(list(d["ids"]), d["scores"], list(d["items"]), {}, {})
        cl = Clustering(d["clusters"], int(d["clusters"].max()) + 1, "saved")
        teach = (d["teaches"], [str(i) for i in d["teach_items"]]) if "teaches" in d else teach_from_report(n, work)
        v = rule_variants(sc, S, cl, teach); v["rule:default"] = _rule(sc, S, cl, teach=teach)
        row = dict(scenario=n, kind=SCENARIOS[n].control or "planted", variants=v)
        if retrain and SCENARIOS[n].control is None and n in (last or {}):
            cfg = load_config(None, [f"data.max_seq_length={MSL}", *SETTINGS]); b = blame(S, cl, cfg, _columns(teach, S.labels))
            acc = [S.ids[i] for i in np.flatnonzero(b.accused)]
            lv = last[n]; c = argparse.Namespace(base=lv["base"], delta=lv["delta"])
            print(f"[bench] retraining {n} without its {len(acc)} accused and random sets ...", flush=True)
            row["retrain"] = retrain_check(SCENARIOS[n], sc, work / n, acc, c, oracle=oracle)
        rep = work / n / f"report{_suffix()}" / "report.json"          # the drill-down is the saved report's own (not re-scored)
        if rep.exists(): row["spans"] = span_check(sc, json.loads(rep.read_text()).get("spans", []))
        rows.append(row)
    return rows


def retrain_table(rows) -> str:
    "One line per retrained scenario: the share of the regression the accused removal recovers, the random removals' range, its rank; then the goal."
    out, ok = ["== retraining without the accused set vs 5 random sets of the same size"], []
    for r in rows:
        rt = r.get("retrain")
        if not rt: continue
        if "skipped" in rt: out.append(f"{r['scenario']:28s} skipped: {rt['skipped']}"); ok.append(False); continue
        rand = [v["recovered"] for k, v in rt.items() if k.startswith("random")]
        n_removed = round(rt["accused"]["culprits_removed"] / rt["removal_precision"]) if rt["removal_precision"] else None
        now = (r["n_accused"], round(r["accused_precision"] * r["n_accused"])) if r.get("n_accused") is not None and r.get("accused_precision") is not None else None
        if now is not None and (n_removed, rt["accused"]["culprits_removed"]) != now:   # retrained under an earlier rule: not evidence for this one
            out.append(f"{r['scenario']:28s} stale: retrained without {n_removed} rows ({rt['accused']['culprits_removed']} culprits), "
                       f"the current rule accuses {now[0]} ({now[1]} culprits)"); ok.append(False); continue
        good = rt["accused"]["recovered"] >= 0.5 and rt["accused_rank"] == 1; ok.append(good)
        out.append(f"{r['scenario']:28s} accused recovers {rt['accused']['recovered']:.2f} (removal precision {rt['removal_precision']:.2f}, "
                   f"{rt['accused']['culprits_removed']} of {r.get('n_culprits', '?')} culprits), random {min(rand):.2f}..{max(rand):.2f}, "
                   f"rank {rt['accused_rank']} of {len(rand) + 1}"
                   + (f"; all culprits removed: {rt['culprits']['recovered']:.2f}" if "culprits" in rt else "") + ('' if good else '   <- goal not met')
                   + (f"   [{rt['source']}]" if "source" in rt else ""))
    for r in rows:                    # diffuse: general rows mixed in, not a removal
        if rm := r.get("retrain_mixed"):
            out.append(f"{r['scenario']:28s} retrained with {rm['n_general']} general rows mixed in: recovers {rm['recovered']:.2f}")
    for r in rows:                    # several causes: one capability's set removed, the other capability watched
        for c, rt in (r.get("retrain_per_capability") or {}).items():
            if "skipped" in rt: out.append(f"{r['scenario'] + ':' + c:28s} skipped: {rt['skipped']}"); ok.append(False); continue
            rand = [v["recovered"] for k, v in rt.items() if k.startswith("random")]
            good = rt["accused"]["recovered"] >= 0.5 and rt["accused_rank"] == 1; ok.append(good)
            out.append(f"{r['scenario'] + ':' + c:28s} accused recovers {rt['accused']['recovered']:.2f} (removal precision "
                       f"{rt['removal_precision']:.2f}), random {min(rand):.2f}..{max(rand):.2f}, rank {rt['accused_rank']} of {len(rand) + 1}; "
                       "other capabilities recover " + ", ".join(f"{o} {v:.2f}" for o, v in rt["accused"].get("others", {}).items())
                       + ('' if good else '   <- goal not met'))
    missing = [r["scenario"] for r in rows if r.get("kind") == "planted" and not r.get("retrain")]
    out.append(f"goal (recovers >= 0.50 and beats every random removal): met in {sum(ok)} of {len(ok)} retrained scenarios"
               + (f"; not retrained: {len(missing)} ({', '.join(missing)})" if missing else ""))
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=None, help="comma-separated names (default: the whole bank and its controls)")
    ap.add_argument("--quick", action="store_true", help=f"four scenarios: {', '.join(QUICK)}")
    ap.add_argument("--work", default="benchmarks/work", help="scenario data, adapters and reports (adapters are reused when unchanged)")
    ap.add_argument("--no-variants", action="store_true"); ap.add_argument("--retrain", action="store_true")
    ap.add_argument("--no-oracle", action="store_true", help="with --retrain: skip the retraining without every culprit (one training less per scenario)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--offline", action="store_true", help="only recompute accusation-rule variants from the scores a previous run saved in --work")
    ap.add_argument("--train-only", action="store_true",
                    help="only train (or find) each scenario's adapter, no diagnosis: the slow half of a whole-bank run, done ahead in "
                         "as many sittings as it takes; the run that follows reuses every adapter")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every diagnosis (repeatable, e.g. --set index.path_scale=0.25); reports and scores go to report-<settings>")
    a = ap.parse_args(argv)
    SETTINGS[:] = a.set
    names = a.scenarios.split(",") if a.scenarios else QUICK if a.quick else [s.name for s in BANK + BEHAVIOURS + CONTROLS]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown: sys.exit(f"unknown scenarios {unknown}; the bank has {', '.join(SCENARIOS)}")
    work = Path(a.work); work.mkdir(parents=True, exist_ok=True)
    if a.train_only: return train_all(names, work)
    if a.offline:
        # results in the order their names' stamps give (a fresh clone's file times say nothing); benchmarks/results keeps
        # only the latest run, so the newest re-scored table is read too, for the retrainings of earlier runs
        prev = sorted(p for p in Path(a.out).glob("attribution-*.json") if not p.stem.endswith("rescored"))
        rescored = sorted(Path(a.out).glob("attribution-*-rescored.json"))[-1:]
        saved = [(f, r) for f in prev for r in json.loads(f.read_text())["rows"]]
        last = {r["scenario"]: r for f, r in saved}                                          # the newest row of each scenario
        retrained = {r["scenario"]: dict(r["retrain"], source=r["retrain"].get("source", f.name))
                     for f, r in [(f, r) for f in rescored for r in json.loads(f.read_text())["rows"]] + saved if r.get("retrain")}
        rows = offline(names, work, a.retrain, last, oracle=not a.no_oracle)
        if prev:       # the last run's rows (levels, CIs, uptake, times) with their diagnosis re-scored under today's default rule
            full = [{**last[r["scenario"]], **r["variants"]["rule:default"], "variants": {**last[r["scenario"]].get("variants", {}), **r["variants"]},
                     **({"spans": r["spans"]} if "spans" in r else {}),
                     **({"retrain": r["retrain"]} if "retrain" in r else {"retrain": retrained[r["scenario"]]} if r["scenario"] in retrained else {})}
                    for r in rows if r["scenario"] in last]
            full += [{**last[n], "verdict": last[n]["verdict"]} for n in names if n in last and n not in {r["scenario"] for r in rows}]
            print(f"== the newest row of each scenario in {', '.join(f.name for f in prev)}, diagnoses re-scored under the current default rule")
            print(table(full))
            for m, v in summary(full).items():
                if m != "controls_unblamed": print(f"{m:24s} {v['median']:.2f} / {v['worst']:.2f}   goal {v['goal_median']} / {v['goal_worst']}   {'met' if v['met'] else 'NOT met'}")
            print("controls unblamed:", summary(full)["controls_unblamed"])
            print("== per kind and half (median / worst)\n" + kind_table(full))
            print(span_line(full), "\n")
            if any("retrain" in r for r in full): print(retrain_table(full), "\n")     # this run's retraining, or the saved rows'

            stamp = prev[-1].stem + "-rescored.json"
            (Path(a.out) / stamp).write_text(json.dumps(dict(rows=full, summary=summary(full), rescored_from=[f.name for f in prev]), indent=1, default=str) + "\n")
            if a.retrain:      # a results file of its own: later runs take these rows (with their retraining) as the newest of their scenarios
                path = Path(a.out) / f"attribution-{time.strftime('%Y%m%d-%H%M%S')}.json"
                path.write_text(json.dumps(dict(rows=[r for r in full if "retrain" in r and "source" not in r["retrain"]], scenarios=names, settings=SETTINGS, complete=True,
                                                offline_retrain=True), indent=1, default=str) + "\n")
                print(f"results: {path}")
        for v in sorted({k for r in rows for k in r["variants"]}):
            vrows = [{**r, **r["variants"][v]} for r in rows]
            s = summary(vrows)
            print(f"{v:30s} " + "; ".join(f"{m} {x['median']:.2f}/{x['worst']:.2f}" for m, x in s.items() if m != "controls_unblamed")
                  + f"; controls unblamed {sum(s['controls_unblamed'].values())}/{len(s['controls_unblamed'])}")
        return
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    path = out / f"attribution-{time.strftime('%Y%m%d-%H%M%S')}.json"
    rows = []
    for n in names:
        print(f"[bench] {n} ...", flush=True)
        rows.append(run(n, work, not a.no_variants, a.retrain, oracle=not a.no_oracle))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
        path.write_text(json.dumps(dict(rows=rows, scenarios=names, settings=SETTINGS, complete=False), indent=1, default=str) + "\n")   # kept as it goes
    print("\n== default settings (" + ", ".join(f"{k}={v}" for k, v in load_config(None).engine.__dict__.items()) + ")"
          + (f", with --set {' '.join(SETTINGS)}" if SETTINGS else ""))
    print(table(rows))
    summ = summary(rows)
    print("\n== over the planted scenarios (median / worst; goal)")
    for m, v in summ.items():
        if m == "controls_unblamed": continue
        print(f"{m:24s} {v['median']:.2f} / {v['worst']:.2f}   goal {v['goal_median']} / {v['goal_worst']}   {'met' if v['met'] else 'NOT met'}")
    print("controls unblamed:", summ["controls_unblamed"])
    print("\n== per kind and half (median / worst)\n" + kind_table(rows))
    print(span_line(rows))
    for r in rows:
        for kind, v in r.get("long_entries", {}).items():
            print(f"  {r['scenario']}: {v['n']} {kind} entries rank {v['ranks']} of {v['of']}, {v['accused']} accused")
    var_names = sorted({k for r in rows for k in r.get("variants", {})})
    var_summ = {}
    for v in var_names:
        vrows = [{**r, **r["variants"][v]} for r in rows if v in r.get("variants", {})]
        var_summ[v] = summary(vrows)
        print(f"\n== variant {v}: " + "; ".join(f"{m} {s['median']:.2f}/{s['worst']:.2f}" for m, s in var_summ[v].items() if m != "controls_unblamed")
              + f"; controls unblamed {var_summ[v]['controls_unblamed']}")
        if any(r["kind"] not in ("planted", "clean", "degrade", "narrow") for r in vrows): print(kind_table(vrows))
    if a.retrain: print("\n" + retrain_table(rows))
    path.write_text(json.dumps(dict(rows=rows, summary=summ, by_kind=by_kind(rows), variants=var_summ, scenarios=names, settings=SETTINGS, complete=True), indent=1, default=str) + "\n")
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
