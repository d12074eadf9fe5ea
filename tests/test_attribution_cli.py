"""benchmarks/attribution.py's `--train-only`: each scenario's adapter is trained once and found finished afterwards, and no
diagnosis runs (training is replaced by a stand-in here; the real trainings are the benchmark's own, and the slow bank test's)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_train_only_trains_each_adapter_once_and_diagnoses_nothing(tmp_path, monkeypatch, capsys):
    import gradian.model.training as training
    spec = importlib.util.spec_from_file_location("attribution_bench_cli", ROOT / "benchmarks" / "attribution.py")
    bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
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
