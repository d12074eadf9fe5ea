"""Training backends on the real embedded SmolLM2-135M-Instruct (2 CPU cores): `hf` and `trl` train 64 short chat examples,
the loss falls, the adapters load in PEFT, the prompt gets no gradient, the same seed gives the same bytes, hf and trl
adapters give the same per-example gradients to rounding, and `gradian train` prints the check findings before training.

One adapter is trained per backend per module (fixtures); the CLI run doubles as the determinism re-run."""
import copy, json, subprocess, sys, time

import pytest
import torch

from gradian import cli
from gradian.core import GradianError
from gradian.model import backends
from gradian.cli import cmd_train
from gradian.model.backends import IGNORE, get_backend
from gradian.model.training import TRAIN_MANIFEST, train_adapter
from gradian.model.core import _quiet_peft
from gradian.testing import SupervisionProbe

N = 64
SETTINGS = dict(r=4, alpha=8, target_modules=["q_proj", "v_proj"], lr=1e-3, batch_size=8, epochs=1.0, logging_steps=1, seed=0)
MAX_LEN = 128
CLI_FLAGS = ["--r", "4", "--alpha", "8", "--target-modules", "q_proj,v_proj", "--lr", "1e-3", "--batch-size", "8",
             "--epochs", "1", "--logging-steps", "1", "--seed", "0", "--max-seq-length", str(MAX_LEN)]


def chat_rows(n=N):
    return [{"id": f"ex{i}", "messages": [{"role": "user", "content": f"What is {i % 8} plus {i // 8}?"},
                                          {"role": "assistant", "content": f"{i % 8} plus {i // 8} is {i % 8 + i // 8}."}]}
            for i in range(n)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", chat_rows())


def _train(backend, smol_model, train_file, tmp_path_factory):
    model, tok = smol_model
    probe, lines = SupervisionProbe(), []
    t0 = time.perf_counter()
    res = train_adapter(train_file, tmp_path_factory.mktemp(backend) / "adapter", model=copy.deepcopy(model), tokenizer=tok,
                        backend=backend, max_seq_length=MAX_LEN, callbacks=[probe], log=lines.append, **SETTINGS)
    return dict(res=res, probe=probe, lines=lines, seconds=time.perf_counter() - t0)


@pytest.fixture(scope="module")
def hf_run(smol_model, train_file, tmp_path_factory):
    return _train("hf", smol_model, train_file, tmp_path_factory)


@pytest.fixture(scope="module")
def trl_run(smol_model, train_file, tmp_path_factory):
    return _train("trl", smol_model, train_file, tmp_path_factory)


def _run_cli(argv, monkeypatch, capsys):
    "`gradian <argv>` through the real `cli.main`, with `train` registered test-locally."
    monkeypatch.setitem(cli.COMMANDS, "train", (cmd_train, cli.TRAIN_HELP))
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- training ---------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["hf", "trl"])
def test_training_finishes_and_loss_falls(backend, hf_run, trl_run):
    run = {"hf": hf_run, "trl": trl_run}[backend]
    res, m = run["res"], run["res"].manifest
    print(f"\n{backend}: {run['seconds']:.1f} s, losses {[round(l, 4) for l in res.losses]}")
    assert m["result"]["global_step"] == N // SETTINGS["batch_size"]
    assert [c["step"] for c in m["result"]["loss_curve"]] == list(range(1, 9))
    assert res.losses[-1] < 0.6 * res.losses[0], res.losses
    assert m["backend"] == backend and m["data"]["n_trained"] == N and m["data"]["left_out_ids"] == []
    assert "token mean" in m["loss_normalization"]
    assert (m["versions"].get("trl") is not None) == (backend == "trl")
    assert m["training"]["max_seq_length"] == MAX_LEN and m["training"]["r"] == 4
    assert sorted(p.name for p in res.out.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors", TRAIN_MANIFEST]
    assert not [p for p in res.out.parent.iterdir() if p.name.startswith(".")]          # no temp folder left
    assert sum(l.startswith("step ") for l in run["lines"]) == 8 and run["lines"][1] == "pre-flight checks: no findings"


@pytest.mark.parametrize("backend", ["hf", "trl"])
def test_adapter_loads_in_peft(backend, hf_run, trl_run, smol_model):
    from peft import PeftModel
    res = {"hf": hf_run, "trl": trl_run}[backend]["res"]
    cfg = json.loads((res.out / "adapter_config.json").read_text())
    assert (cfg["r"], cfg["lora_alpha"], sorted(cfg["target_modules"]), cfg["peft_type"]) == (4, 8, ["q_proj", "v_proj"], "LORA")
    with _quiet_peft(): loaded = PeftModel.from_pretrained(copy.deepcopy(smol_model[0]), str(res.out))
    trained = dict(res.model.named_parameters())
    lora = [(n, p) for n, p in loaded.named_parameters() if "lora_" in n]
    assert len(lora) == 2 * 2 * 30                                # q and v, A and B, 30 layers
    for n, p in lora: assert torch.equal(p, trained[n]), n


@pytest.mark.parametrize("backend", ["hf", "trl"])
def test_prompt_tokens_get_no_gradient(backend, hf_run, trl_run, smol_model):
    "During the first training step, the gradient reaching the LM head is exactly zero wherever the next token is not an answer token."
    run = {"hf": hf_run, "trl": trl_run}[backend]
    probe, tok = run["probe"], smol_model[1]
    print(f"\n{backend}: {probe.summary()}")
    assert probe.max_grad_off_target() == 0.0
    assert probe.min_grad_on_target() > 0
    for row in probe.labels:                                    # what is supervised is the answer and its end-of-turn token
        sup = [int(x) for x in row if x != IGNORE]
        text = tok.decode(sup)
        assert text.endswith("<|im_end|>") and " plus " in text and "What is" not in text and "user" not in text, text


# --- determinism, through the command line -----------------------------------------------------

def test_same_seed_same_adapter_through_cli(hf_run, train_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "cli-adapter"
    rc, stdout, stderr = _run_cli(["train", "--backend", "hf", "--model", "embedded", "--data", str(train_file), "--out", str(out), *CLI_FLAGS],
                                  monkeypatch, capsys)
    print(stdout)
    assert rc == 0, stderr
    assert (out / "adapter_model.safetensors").read_bytes() == (hf_run["res"].out / "adapter_model.safetensors").read_bytes()
    m = json.loads((out / TRAIN_MANIFEST).read_text())
    assert m["result"]["loss_curve"] == hf_run["res"].manifest["result"]["loss_curve"]
    assert m["data"]["rows_sha256_16"] == hf_run["res"].manifest["data"]["rows_sha256_16"]
    assert stdout.index("pre-flight checks: no findings") < stdout.index("step 1/8") < stdout.index("step 8/8") < stdout.index("adapter written to")
    assert sum(l.startswith("step ") for l in stdout.splitlines()) == 8
    assert "training (hf)" in stderr and "8/8" in stderr                # the progress bar
    rc, _, stderr = _run_cli(["train", "--backend", "hf", "--data", str(train_file), "--out", str(out)], monkeypatch, capsys)
    assert rc == 2 and "--overwrite" in stderr and "Traceback" not in stderr


def test_cli_trl_backend(trl_run, train_file, tmp_path, monkeypatch, capsys, smol_model):
    "`gradian train --backend trl` end to end (two steps): same data and seed give the same first losses as the trl fixture's run."
    from peft import PeftModel
    out = tmp_path / "trl-cli"
    rc, stdout, stderr = _run_cli(["train", "--backend", "trl", "--model", "embedded", "--data", str(train_file), "--out", str(out),
                                   *CLI_FLAGS, "--max-steps", "2", "--no-progress"], monkeypatch, capsys)
    assert rc == 0, stderr
    m = json.loads((out / TRAIN_MANIFEST).read_text())
    assert m["backend"] == "trl" and m["versions"]["trl"] and m["result"]["global_step"] == 2
    assert [c["loss"] for c in m["result"]["loss_curve"]] == trl_run["res"].losses[:2]
    assert stdout.index("pre-flight checks: no findings") < stdout.index("step 1/2") < stdout.index("adapter written to")
    with _quiet_peft(): PeftModel.from_pretrained(copy.deepcopy(smol_model[0]), str(out))


# --- hf and trl agree ---------------------------------------------------------------------------

def _lora_grads(model, ids, sup):
    from gradian.grads.loss import per_example_ce
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    for p in params: p.requires_grad_(True)
    model.eval()
    loss = per_example_ce(model(input_ids=ids).logits, ids, sup)[0]
    g = torch.autograd.grad(loss, params)
    return torch.cat([x.flatten() for x in g]), loss.item()


def test_hf_and_trl_adapters_give_the_same_gradients(hf_run, trl_run, smol_model):
    """Same seed and data: the loss curves agree to 1e-3 and the per-example LoRA gradients of a fixed example to rounding.
    They are not bit-identical because TRL computes the loss with its own fused LM-head kernel (see model.backends.trl)."""
    from peft import PeftModel
    from gradian.data import load_train, tokenize_example
    base, tok = smol_model
    ex = tokenize_example(load_train([{"prompt": "What is 3 plus 4?", "completion": "3 plus 4 is 7."}])[0], tok, MAX_LEN)
    ids, sup = torch.tensor([ex.input_ids]), torch.tensor([ex.supervised])
    g, loss = {}, {}
    for b, run in (("hf", hf_run), ("trl", trl_run)):
        with _quiet_peft(): loaded = PeftModel.from_pretrained(copy.deepcopy(base), str(run["res"].out))
        g[b], loss[b] = _lora_grads(loaded, ids, sup)
    cos = torch.nn.functional.cosine_similarity(g["hf"], g["trl"], dim=0).item()
    rel = ((g["hf"] - g["trl"]).norm() / g["hf"].norm()).item()
    w = {b: torch.cat([p.detach().flatten() for n, p in r["res"].model.named_parameters() if "lora_" in n]) for b, r in (("hf", hf_run), ("trl", trl_run))}
    wrel = ((w["hf"] - w["trl"]).norm() / w["hf"].norm()).item()
    curve = max(abs(a - b) for a, b in zip(hf_run["res"].losses, trl_run["res"].losses))
    print(f"\nfixed-example loss hf {loss['hf']:.6f} trl {loss['trl']:.6f}; gradient cosine {cos:.6f}, relative L2 difference {rel:.2e}; "
          f"adapter weights relative L2 difference {wrel:.2e}; loss curves max |diff| {curve:.1e}")
    assert curve < 1e-3
    assert abs(loss["hf"] - loss["trl"]) < 1e-3
    assert cos > 0.9999 and rel < 5e-3
    assert wrel < 5e-3


# --- defects are reported before training --------------------------------------------------------

def test_defective_data_trains_after_printing_findings(tmp_path, monkeypatch, capsys):
    long = [{"id": f"long{i}", "prompt": f"Tell me about river {i}.", "completion": " ".join([f"River {i} carries water to the sea."] * 8)} for i in range(3)]
    f = write_jsonl(tmp_path / "train.jsonl", chat_rows(13) + long)
    out = tmp_path / "adapter"
    rc, stdout, stderr = _run_cli(["train", "--backend", "hf", "--model", "embedded", "--data", str(f), "--out", str(out), "--max-seq-length", "64",
                                   "--max-steps", "2", "--batch-size", "4", "--r", "2", "--target-modules", "q_proj", "--logging-steps", "1", "--no-progress"],
                                  monkeypatch, capsys)
    print(stdout)
    assert rc == 0, stderr
    assert stdout.index("data.completion_truncated  [3]") < stdout.index("config.max_seq_length_vs_data  [3]") < stdout.index("step 1/2")
    assert "ERROR" in stdout.split("step 1/2")[0]
    m = json.loads((out / TRAIN_MANIFEST).read_text())
    assert {f["check_id"] for f in m["findings"]} >= {"data.completion_truncated", "config.max_seq_length_vs_data"}
    assert m["result"]["global_step"] == 2 and m["data"]["n_trained"] == 16 and m["training"]["max_seq_length"] == 64
    assert "training (hf)" not in stderr                                  # --no-progress


# --- user errors: exit code 2, a fix, no traceback, nothing loaded --------------------------------

def test_user_errors_exit_2(train_file, tmp_path, monkeypatch, capsys):
    def run(*argv):
        rc, out, err = _run_cli(["train", *map(str, argv)], monkeypatch, capsys)
        assert rc == 2 and "Traceback" not in err, (rc, err)
        return err
    assert "unknown training backend 'axolotl'" in run("--backend", "axolotl", "--data", train_file, "--out", tmp_path / "a")
    assert "fix: use one of: hf, trl, unsloth" in run("--backend", "axolotl", "--data", train_file, "--out", tmp_path / "a")
    assert "no training data given" in run("--out", tmp_path / "a")
    assert "no output folder given" in run("--data", train_file)
    (tmp_path / "bad.jsonl").write_text(json.dumps(chat_rows(1)[0]) + "\n{oops\n")
    assert f"{tmp_path / 'bad.jsonl'}:2: invalid JSON" in run("--data", tmp_path / "bad.jsonl", "--out", tmp_path / "a")
    assert "config key 'training.r' expects int" in run("--data", train_file, "--out", tmp_path / "a", "training.r=four")
    if not torch.cuda.is_available():
        err = run("--backend", "unsloth", "--data", train_file, "--out", tmp_path / "a")
        assert "needs a CUDA GPU" in err and "--backend hf or trl" in err
        assert "unsloth" not in sys.modules
    monkeypatch.setitem(sys.modules, "trl", None)                        # as if trl were not installed
    err = run("--backend", "trl", "--data", train_file, "--out", tmp_path / "a")
    assert "trl is not installed" in err and "pip install 'trl>=0.12'" in err
    assert not (tmp_path / "a").exists()


def test_flags_config_file_and_overrides_reach_training(tmp_path, monkeypatch, capsys):
    "Flags win over dotted overrides, which win over the --config file, which wins over the defaults."
    seen = {}
    import gradian.model.training as training
    monkeypatch.setattr(training, "train_adapter", lambda data, out, model, cfg, **kw: seen.update(data=data, out=out, model=model, cfg=cfg, **kw))
    (tmp_path / "g.yaml").write_text("training:\n  lr: 0.0005\n  r: 16\n  backend: trl\n  out: from-config\ndata:\n  train: t.jsonl\n  max_seq_length: 256\n")
    rc, _, err = _run_cli(["train", "--config", str(tmp_path / "g.yaml"), "--r", "2", "training.r=8", "training.epochs=2"], monkeypatch, capsys)
    assert rc == 0, err
    t = seen["cfg"].training
    assert (t.lr, t.r, t.epochs, t.backend, t.out) == (0.0005, 2, 2.0, "trl", "from-config")
    assert (seen["data"], seen["out"], seen["model"], seen["cfg"].data.max_seq_length) == ("t.jsonl", "from-config", "embedded", 256)
    assert seen["progress"] is True


# --- backends, doctor and imports ----------------------------------------------------------------

def test_registry_and_doctor_agree():
    from gradian.doctor import backend_status, installed_versions
    doc = backend_status(installed_versions(), torch.cuda.is_available())
    for name in ("hf", "trl", "unsloth"):
        ok, why = get_backend(name).status()
        assert ok == doc[name]["ready"], (name, why, doc[name])
    if not torch.cuda.is_available():
        assert "needs CUDA" in doc["unsloth"]["reason"] and "needs a CUDA GPU" in get_backend("unsloth").status()[1]


def test_importing_the_backends_is_light():
    code = ("import sys, gradian.model.backends as b; light = 'torch' not in sys.modules and 'transformers' not in sys.modules; "
            "import gradian.model.backends.unsloth; print(light, 'unsloth' in sys.modules, 'trl' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.split() == ["True", "False", "False"], r.stderr


def test_the_difference_is_the_loss_kernel(smol_model):
    """One batch, one non-zero LoRA: transformers' loss (full float32 logits) and TRL's fused LM-head loss are the same function
    rounded differently; TRL's is the closer one to a float64 reference. This is what makes hf and trl adapters differ."""
    from trl.trainer.utils import add_fused_lm_head
    from gradian.data import load_train
    from gradian.model.backends import CausalCollator, training_rows
    from gradian.model.core import attach_lora
    base, tok = smol_model
    m = attach_lora(copy.deepcopy(base), r=4, alpha=8, target_modules=["q_proj", "v_proj"], seed=0).train()
    rows, _ = training_rows(load_train(chat_rows(8)), tok, MAX_LEN)
    batch = CausalCollator(tok.pad_token_id)(rows)
    n_items = int((batch["labels"][:, 1:] != IGNORE).sum())
    params = [p for p in m.parameters() if p.requires_grad]
    def loss_and_grad(**kw):
        loss = m(**batch, num_items_in_batch=n_items, **kw).loss
        return loss.item(), torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])
    hf_loss, hf_g = loss_and_grad()
    with torch.no_grad():
        h = m.get_base_model().model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state[:, :-1]
        tgt = batch["labels"][:, 1:]; keep = tgt != IGNORE
        logp = torch.log_softmax(h[keep].double() @ m.get_base_model().lm_head.weight.double().T, -1)
        ref = -logp.gather(1, tgt[keep][:, None]).mean().item()
    add_fused_lm_head(m.get_base_model(), outputs=("log_probs",))
    trl_loss, trl_g = loss_and_grad(fused_lm_head=True)
    rel = ((hf_g - trl_g).norm() / hf_g.norm()).item()
    print(f"\nloss: transformers {hf_loss:.7f}, TRL fused {trl_loss:.7f}, float64 reference {ref:.7f}; gradient relative L2 difference {rel:.1e}")
    assert abs(trl_loss - ref) < abs(hf_loss - ref) < 1e-4
    assert 0 < rel < 1e-3
