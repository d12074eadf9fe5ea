"""Leave-cluster-out fidelity (gradian.fidelity) outside the notebook's namespace, on the suite's tiny model: every step runs, the
full retraining reproduces the fine-tune, and the table has one row per cluster. Its real run is experiment E on the embedded model."""
import json

import numpy as np
import pytest

from gradian.core import GradianError
from gradian.data import load_eval, load_train
from gradian.fidelity import datamodel_score, engine_scores, leave_cluster_out, path_points, query_loss
from gradian.index.build import build_index
from gradian.model.core import load_model
from gradian.query.signals import build_query
from gradian.scenarios import ScenarioSpec, build_scenario
from gradian.suite import SuiteParams, retrain_without, suite_config, suite_model


def _tiny_run(tmp_path, **params):
    "Suite settings (exact gradients), a small planted scenario written under `tmp_path`, its training file and the suite's tiny model."
    p = SuiteParams(suite_config(["index.projection_dim=null"]), n_clean=10, **params).check()
    sc = build_scenario(ScenarioSpec("t", p.family, "sentence", p.poison_fraction, decoys=("format",), n_clean=p.n_clean, seed=p.seed))
    tr, ev = sc.write(tmp_path / "data")
    return p, sc, tr, ev, suite_model(p, tmp_path)


def test_leave_cluster_out_on_the_tiny_model(tmp_path):
    p, sc, tr, ev, ref = _tiny_run(tmp_path, lco_clusters=3, engines="datainf,graddot")
    adapter = retrain_without(p, tr, [], tmp_path / "round1", ref)
    m, tok = load_model(ref, adapter)
    idx = build_index(m, tok, load_train(tr), tmp_path / "index", projection_dim=None)
    q = build_query(m, tok, [i for i in load_eval(ev) if i.capability == sc.capability], idx, signal="classic", per_item=True)
    pts = path_points(m, tok, idx, q)
    assert len(pts) == 1                                    # no path index beside it: the tuned point only
    r = leave_cluster_out(p, tr, pts, ref, adapter, tmp_path / "lco", planted=sc.culprits, normalize="none", lambda_scales=(0.01, 1.0))
    assert r["prediction"] == dict(normalize="none", points=[1.0])
    for e in ("datainf", "graddot"):                        # one point, no normalisation: the diagnosed form is the raw one
        assert [row[f"predicted_{e}"] for row in r["rows"]] == [row[f"raw_{e}"] for row in r["rows"]] and r["engines"][e] == r["engines_raw"][e]
    s1 = engine_scores("datainf", m, tok, load_train(tr), pts, normalize="l2")[1]
    assert np.allclose(engine_scores("datainf", m, tok, load_train(tr), pts * 2, normalize="l2")[1], s1)   # a point twice: the same mean
    assert not np.allclose(engine_scores("datainf", m, tok, load_train(tr), pts)[1], s1)                   # normalize reaches the engine
    assert [row["cluster"] for row in r["rows"]] == [0, 1, 2] and sum(row["size"] for row in r["rows"]) == idx.n
    assert abs(r["full_retrain_drift"]) < 1e-6 and abs(r["query_loss_full"] - query_loss(m, tok, q)) < 1e-6   # the full retraining is the fine-tune
    assert all(np.isfinite(row["measured"]) and row["measured"] != 0 for row in r["rows"])
    assert set(r["engines"]) == {"datainf", "graddot"} and set(r["damping"]) == {"datainf"} and set(r["damping"]["datainf"]) == {"0.01", "1.0"}
    assert r["n_trainings"] == 4
    steps = [json.loads((tmp_path / "lco" / d / "adapter" / "train_manifest.json").read_text())["result"]["global_step"] for d in ("full", "without-0", "without-1", "without-2")]
    assert steps == [r["steps_per_training"]] * 4, steps   # a removal is not also a shorter fine-tune
    assert r["removal"] == "mask"
    for c, row in enumerate(r["rows"]):                    # masked: every retraining keeps all rows in the full run's order, the cluster without loss
        data = json.loads((tmp_path / "lco" / f"without-{c}" / "adapter" / "train_manifest.json").read_text())["data"]
        assert data["n_trained"] == idx.n and len(data["masked_ids"]) == row["size"]
    lds = datamodel_score(p, tr, pts, ref, adapter, tmp_path / "lco", n_subsets=3)       # reuses the full run above
    assert set(lds["engines"]) == {"datainf", "graddot"} == set(lds["engines_raw"]) and len(lds["measured"]) == 3 and all(np.isfinite(lds["measured"]))
    assert lds["random"]["lo"] < 0 < lds["random"]["hi"]


def test_a_finished_retraining_is_reused_and_no_other(tmp_path):
    "retrain_without reuses a finished run in its folder only on the same rows and settings; one cut off before its manifest trains again."
    p, sc, tr, _, ref = _tiny_run(tmp_path)
    drop = sc.culprits[:2]
    weights = lambda: (tmp_path / "r" / "adapter" / "adapter_model.safetensors").stat().st_mtime_ns
    retrain_without(p, tr, drop, tmp_path / "r", ref); first = weights()
    retrain_without(p, tr, drop, tmp_path / "r", ref)
    assert weights() == first                                                       # same rows, model, settings: reused
    for change in (dict(drop=sc.culprits[:3]), dict(max_steps=2), dict(removal="mask"), dict(removal="mask", drop=sc.culprits[:1])):
        before = weights()                                                          # other rows, setting, removal or mask: trained again
        retrain_without(p, tr, change.get("drop", drop), tmp_path / "r", ref, **{k: v for k, v in change.items() if k != "drop"})
        assert weights() != before, change
    before = weights(); retrain_without(p, tr, sc.culprits[:1], tmp_path / "r", ref, removal="mask")
    assert weights() == before                                                      # the same mask again: reused
    with pytest.raises(GradianError, match="removal"): retrain_without(p, tr, drop, tmp_path / "r", ref, removal="hide")
    (tmp_path / "r" / "adapter" / "train_manifest.json").unlink()                   # cut off before the manifest: not finished
    before = weights(); retrain_without(p, tr, sc.culprits[:3], tmp_path / "r", ref, max_steps=2)
    assert weights() != before


def test_a_retraining_cut_off_does_not_reuse_the_run_before_it(tmp_path, monkeypatch):
    "Killed while training on new rows: the folder then holds those rows, and the previous rows' adapter must not pass for theirs."
    import gradian.model.training as training
    p, sc, tr, _, ref = _tiny_run(tmp_path)
    out = tmp_path / "r"
    retrain_without(p, tr, sc.culprits[:2], out, ref)
    def killed(*a, **k): raise KeyboardInterrupt
    monkeypatch.setattr(training, "train_adapter", killed)
    with pytest.raises(KeyboardInterrupt): retrain_without(p, tr, sc.culprits[:3], out, ref)
    monkeypatch.undo()
    a = retrain_without(p, tr, sc.culprits[:3], out, ref)
    assert json.loads((a / "train_manifest.json").read_text())["data"]["n_examples"] == len(sc.train) - 3
