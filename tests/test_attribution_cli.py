"""benchmarks/attribution.py's `--train-only`: each scenario's adapter is trained once and found finished afterwards, and no
diagnosis runs (training is replaced by a stand-in here; the real trainings are the benchmark's own, and the slow bank test's)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench(name:str):
    "benchmarks/attribution.py loaded as a fresh module of its own (the tests patch its functions)."
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "attribution.py")
    bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
    return bench


def test_train_only_trains_each_adapter_once_and_diagnoses_nothing(tmp_path, monkeypatch, capsys):
    import gradian.model.training as training
    bench = _bench("attribution_bench_cli")
    calls = []
    def fake_train(data, out, **kw):
        calls.append(Path(out).parent.name); Path(out).mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(training, "train_adapter", fake_train)
    monkeypatch.setattr(bench, "analyze", lambda *a, **k: (_ for _ in ()).throw(AssertionError("--train-only diagnosed")))
    names = ["currency-sentence", "control-clean-currency"]
    args = ["--train-only", "--scenarios", ",".join(names), "--work", str(tmp_path)]
    bench.main(args)
    assert calls == names and all((tmp_path / n / "data").is_dir() and (tmp_path / n / "adapter" / "bench_stamp").is_file() for n in names)
    bench.main(args)                                                                  # a second sitting: nothing left to train
    assert calls == names and capsys.readouterr().out.count("finished adapter reused") == 2


def test_retrain_table_calls_a_retraining_of_another_accused_set_stale():
    "A saved retraining counts only where it removed as many rows, and as many culprits, as today's accused set holds."
    bench = _bench("attribution_bench_rt")
    rand = {f"random{j}": dict(recovered=0.1 * j) for j in range(5)}
    rt = dict(accused=dict(recovered=0.8, culprits_removed=9), removal_precision=0.9, accused_rank=1, source="old.json", **rand)
    row = dict(scenario="s", kind="planted", n_culprits=10, retrain=rt)
    same = bench.retrain_table([dict(row, n_accused=10, accused_precision=0.9)])
    assert "accused recovers 0.80" in same and "[old.json]" in same and "met in 1 of 1" in same, same
    other = bench.retrain_table([dict(row, n_accused=10, accused_precision=1.0)])     # same size, one culprit more today
    assert "stale: retrained without 10 rows (9 culprits), the current rule accuses 10 (10 culprits)" in other and "met in 0 of 1" in other, other
    weak = bench.retrain_table([dict(row, n_accused=10, accused_precision=0.9, retrain=dict(rt, accused_rank=2))])
    assert "goal not met" in weak and "met in 0 of 1" in weak, weak


def test_retrain_check_removes_each_set_once_and_ranks_the_accused(tmp_path, monkeypatch):
    "`retrain_check` and `behaviour_truth.py` share `removal`: each drop set trained once, its level turned into a recovered share."
    import argparse, gradian.evaluation as evaluation, gradian.model.core as core
    bench = _bench("attribution_bench_rc")
    sc = bench.build_scenario(bench.SCENARIOS["currency-sentence"]); sc.write(tmp_path / "data")
    culprits, dropped = set(sc.culprits), {}
    def fake_train(spec_, sc_, d, drop=(), tag="adapter", extra=()):
        dropped[tag] = set(drop); return tag, 1.0
    level = lambda tag: 0.5 + 0.3 * len(dropped[tag] & culprits) / len(culprits)    # removing culprits restores the level
    monkeypatch.setattr(bench, "train", fake_train)
    monkeypatch.setattr(core, "load_model", lambda name, ad: (ad, None))
    monkeypatch.setattr(evaluation, "evaluate", lambda m, tok, items, ev, **k: [argparse.Namespace(name="currency", tuned=level(m))])
    out = bench.retrain_check(sc.spec, sc, tmp_path, sorted(culprits)[:5], argparse.Namespace(base=0.8, delta=-0.3), n_random=3)
    assert sorted(dropped) == ["retrain-accused", "retrain-culprits"] + [f"retrain-random{j}" for j in range(3)]
    assert abs(out["culprits"]["recovered"] - 1.0) < 1e-9 and out["accused"]["culprits_removed"] == 5
    assert abs(out["accused"]["recovered"] - 5 / len(culprits)) < 1e-9 and out["removal_precision"] == 1.0
    assert out["accused_rank"] == 1 + sum(out[f"random{j}"]["recovered"] >= out["accused"]["recovered"] for j in range(3))


def test_retrain_check_for_one_of_several_capabilities(tmp_path, monkeypatch):
    "Several causes: one capability's accused set removed, every set trained once under its own tag, the other capability watched."
    import argparse, gradian.evaluation as evaluation, gradian.model.core as core
    bench = _bench("attribution_bench_rc2")
    sc = bench.build_scenario(bench.SCENARIOS["currency-city-two"]); sc.write(tmp_path / "data")
    dropped = {}
    def fake_train(spec_, sc_, d, drop=(), tag="adapter", extra=()):
        dropped[tag] = set(drop); return tag, 1.0
    level = lambda tag, c: 0.5 + 0.3 * len(dropped[tag] & set(sc.culprits_of(c))) / len(sc.culprits_of(c))
    monkeypatch.setattr(bench, "train", fake_train)
    monkeypatch.setattr(core, "load_model", lambda name, ad: (ad, None))
    monkeypatch.setattr(evaluation, "evaluate", lambda m, tok, items, ev, **k: [
        argparse.Namespace(name=c, tuned=level(m, c)) for c in sorted({i.capability for i in items})])
    lv = argparse.Namespace(base=0.8, delta=-0.3)
    city = sorted(sc.culprits_of("city"))
    out = bench.retrain_check(sc.spec, sc, tmp_path, city[:6], lv, n_random=2, cap="city", others={"currency": lv})
    assert sorted(dropped) == ["retrain-city-accused", "retrain-city-culprits", "retrain-city-random0", "retrain-city-random1"]
    assert out["accused"]["culprits_removed"] == 6 and abs(out["accused"]["recovered"] - 6 / len(city)) < 1e-9
    assert abs(out["accused"]["others"]["currency"]) < 1e-9           # currency's culprits stayed: its regression stays
    assert abs(out["culprits"]["recovered"] - 1.0) < 1e-9


def test_mix_check_retrains_with_general_rows_added(tmp_path, monkeypatch):
    "Diffuse ground truth: the scenario's rows plus one general row per three, none about the evaluated families; the level read back."
    import argparse, gradian.evaluation as evaluation, gradian.model.core as core
    bench = _bench("attribution_bench_mix")
    sc = bench.build_scenario(bench.SCENARIOS["diffuse-plural-held"]); sc.write(tmp_path / "data")
    seen = {}
    def fake_train(spec_, sc_, d, drop=(), tag="adapter", extra=()):
        seen[tag] = (set(drop), list(extra)); return tag, 1.0
    monkeypatch.setattr(bench, "train", fake_train)
    monkeypatch.setattr(core, "load_model", lambda name, ad: (ad, None))
    monkeypatch.setattr(evaluation, "evaluate", lambda m, tok, items, ev, **k: [argparse.Namespace(name="plural", tuned=0.35)])
    out = bench.mix_check(sc.spec, sc, tmp_path, argparse.Namespace(base=0.5, delta=-0.4))
    drop, extra = seen["retrain-mixed"]
    assert drop == set() and len(extra) == out["n_general"] == round(len(sc.train) / 3)
    assert not {r["id"] for r in extra} & {r["id"] for r in sc.train}
    assert abs(out["recovered"] - 0.625) < 1e-9     # from 0.5, a -0.4 drop, back at 0.35: 0.25 of the 0.4 came back, 62.5%


def test_second_rule_evidence_reads_every_row_format():
    "A scenario in real-data shapes (alpaca rows, system prompts) feeds the second rule's evidence; before, alpaca rows raised KeyError."
    import argparse
    from gradian.query.signals import QueryPair
    bench = _bench("attribution_bench_shapes")
    sc = bench.build_scenario(bench.SCENARIOS["list-superlative-held"])
    assert any("instruction" in r for r in sc.train)
    ids = [r["id"] for r in sc.train]
    pair = QueryPair("x", "Name the largest ocean on Earth.", "Pacific", "Atlantic", "contrastive", reference="Pacific")
    a = argparse.Namespace(attribution=argparse.Namespace(index=argparse.Namespace(ids=ids), query=argparse.Namespace(pairs=[pair])))
    mask, items = bench.teach_mask(a, sc)
    assert mask.shape == (len(ids), 1) and items == ["x"]
