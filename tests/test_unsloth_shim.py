"""The parts of the unsloth shim that need no CUDA: snapshot/restore of patched classes, `prepare_for_gradients` on stand-ins
and on a real PEFT model, the compat report, and the backend's refusal on a machine without CUDA (without importing unsloth).
The GPU half of the contract is tests/integration/test_unsloth_contract.py."""
import copy, io, sys, types

import pytest
import torch

from gradian.core import GradianError
from gradian.model.backends import unsloth as U
from gradian.testing import tiny_llama


def tiny(seed=0):
    return tiny_llama(seed=seed, vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1)


X = torch.tensor([[1, 5, 9, 13, 2]])


@pytest.fixture
def fake_module(monkeypatch):
    "A throwaway module with a class hierarchy, registered in sys.modules for the test only."
    mod = types.ModuleType("gradian_fake_modeling")
    exec("class Attn:\n    def forward(self, x): return ('attn', x)\n    @property\n    def kind(self): return 'plain'\n"
         "class Rope:\n    pass\n"
         "def helper(): return 'plain'\n", mod.__dict__)
    mod.Attn.__module__ = mod.Rope.__module__ = mod.__name__
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod


def test_restore_undoes_every_kind_of_patch(fake_module):
    m = fake_module
    snap = U.snapshot_modeling_forwards([m.__name__])
    orig = dict(forward=m.Attn.forward, kind=vars(m.Attn)["kind"], Rope=m.Rope, helper=m.helper)
    m.Attn.forward = lambda self, x: self.apply_qkv(x)                 # rebound method
    m.Attn.kind = property(lambda self: "fast")                         # replaced property
    m.Attn.apply_o = lambda self, x: x                                  # added method
    m.Rope = type("FastRope", (), {})                                   # module-level class swapped
    m.helper = lambda: "fast"                                           # module-level function swapped
    m.fast_kernel = lambda: None                                        # module-level function added
    assert sorted(U.changed_forwards(snap)) == sorted([
        "gradian_fake_modeling.Attn.forward", "gradian_fake_modeling.Attn.kind", "+gradian_fake_modeling.Attn.apply_o",
        "gradian_fake_modeling:Rope", "gradian_fake_modeling:helper", "+gradian_fake_modeling:fast_kernel"])
    with pytest.raises(AttributeError): m.Attn().forward(1)
    restored = U._restore_modeling_forwards(snap)
    assert len(restored) == 6
    assert m.Attn.forward is orig["forward"] and vars(m.Attn)["kind"] is orig["kind"] and m.Rope is orig["Rope"] and m.helper is orig["helper"]
    assert not hasattr(m.Attn, "apply_o") and not hasattr(m, "fast_kernel")
    assert m.Attn().forward(1) == ("attn", 1) and m.Attn().kind == "plain"
    assert U.changed_forwards(snap) == [] and U._restore_modeling_forwards(snap) == []


def test_train_then_analyse_failure_mode_is_fixed_by_restore():
    "unsloth-style patches on the real Llama and PEFT classes break a plain model built later; the restore makes it work and exact again."
    import transformers.models.llama.modeling_llama as ml
    import peft.peft_model as pm
    from gradian.model.core import attach_lora
    before = tiny()(X).logits
    snap = U.snapshot_modeling_forwards(["transformers.models.llama.modeling_llama", "peft.peft_model"])
    try:
        def fast_attn(self, hidden_states, *a, **k): return self.apply_qkv(self, hidden_states)
        def fast_peft(self, *a, **k): raise RuntimeError("fused path")
        ml.LlamaAttention.forward, ml.LlamaDecoderLayer.forward = fast_attn, fast_attn
        pm.PeftModelForCausalLM.forward = fast_peft
        ml.LlamaRotaryEmbedding = type("UnslothRope", (ml.LlamaRotaryEmbedding,), {})
        with pytest.raises(AttributeError, match="apply_qkv"): tiny()(X)
        assert len(U.changed_forwards(snap)) == 4
    finally:
        U._restore_modeling_forwards(snap)
    assert U.changed_forwards(snap) == []
    assert torch.equal(tiny()(X).logits, before)
    lm = attach_lora(tiny(), r=2, target_modules=["q_proj"])
    assert lm(input_ids=X).logits.shape == (1, 5, 64)


def test_default_snapshot_covers_the_patched_modules():
    snap = U.snapshot_modeling_forwards()
    assert "transformers.models.llama.modeling_llama" in snap.globals and "peft.peft_model" in snap.globals
    assert "transformers.models.llama.modeling_llama.LlamaAttention" in snap.classes
    assert "peft.peft_model.PeftModelForCausalLM" in snap.classes
    assert "transformers.trainer.Trainer" in snap.classes
    assert "unsloth" not in sys.modules and snap.unsloth_imported is False


class _Cfg:
    def __init__(self): self.use_cache = True


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.gradient_checkpointing = True; self.lin = torch.nn.Linear(4, 4)


class _Inner(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.config = _Cfg(); self.layers = torch.nn.ModuleList([_Block(), _Block()]); self.gradient_checkpointing = True


class StandIn(torch.nn.Module):
    "The state an unsloth session leaves on a model: checkpointing, cache, for_inference flags, fast-LoRA caches, train mode."
    def __init__(self):
        super().__init__(); self.model = _Inner(); self.config = self.model.config
        for m in (self, self.model): m._flag_for_generation = True
        self.model.layers[1].lin.weight._fast_lora = ("A", "B")


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("UNSLOTH_RETURN_LOGITS", raising=False)
    monkeypatch.delenv("UNSLOTH_RETURN_HIDDEN_STATES", raising=False)


def test_prepare_for_gradients_flags_on_a_stand_in(clean_env, monkeypatch):
    monkeypatch.setenv("UNSLOTH_RETURN_HIDDEN_STATES", "1")
    m = StandIn().train()
    s = U.gradient_state(m)
    assert not s["ready"] and not s["fused_cross_entropy_off"]
    assert (s["gradient_checkpointing_modules"], s["use_cache_configs"], s["inference_flags"], s["fast_lora_caches"], s["training"]) == (3, 1, 2, 1, True)
    changes = U.prepare_for_gradients(m)
    assert changes == ["env UNSLOTH_RETURN_LOGITS: None -> '1'", "env UNSLOTH_RETURN_HIDDEN_STATES: '1' -> None",
                       "gradient checkpointing off on modules: 3", "inference flags removed: 2",
                       "configs with use_cache turned off: 1", "fast-LoRA caches dropped: 1", "train() -> eval()"]
    s = U.gradient_state(m)
    assert s["ready"] and s["fused_cross_entropy_off"] and not m.training and m.config.use_cache is False
    assert not any(hasattr(x, "_flag_for_generation") for x in (m, m.model))
    assert not any(getattr(x, "gradient_checkpointing", False) for x in m.modules())
    assert not hasattr(m.model.layers[1].lin.weight, "_fast_lora")
    assert U.prepare_for_gradients(m) == []                                      # idempotent
    with torch.inference_mode():
        with pytest.raises(GradianError, match="inference_mode"): U.prepare_for_gradients(m)


def test_compat_report_prints_the_state(clean_env):
    buf = io.StringIO()
    s = U.unsloth_compat_report(StandIn().train(), file=buf)
    text = buf.getvalue()
    assert not s["ready"] and "verdict: NOT ready: call gradian.model.backends.unsloth.prepare_for_gradients(model)" in text
    assert "gradient checkpointing off:   NO (3 modules on)" in text and "fused cross-entropy off (UNSLOTH_RETURN_LOGITS=1): NO" in text
    m = StandIn(); U.prepare_for_gradients(m)
    buf = io.StringIO(); U.unsloth_compat_report(m, file=buf)
    assert "verdict: ready for gradients" in buf.getvalue() and "unsloth forwards on this model: none" in buf.getvalue()


def test_prepare_for_gradients_leaves_hf_gradients_unchanged(clean_env):
    "On a plain HF PEFT model the shim changes no number: per-example gradients before and after are identical."
    from gradian.grads.loss import per_example_ce
    from gradian.model.core import attach_lora
    m = attach_lora(tiny(), r=2, target_modules=["q_proj", "v_proj"], seed=1).eval()
    sup = torch.tensor([[0, 0, 1, 1, 1]])
    def grads():
        params = [p for n, p in m.named_parameters() if "lora_" in n]
        return torch.autograd.grad(per_example_ce(m(input_ids=X).logits, X, sup)[0], params)
    g0 = grads()
    m.config.use_cache = True
    U.prepare_for_gradients(m)
    assert all(torch.equal(a, b) for a, b in zip(g0, grads()))


def test_seed_lora_matches_attach_lora():
    from peft import LoraConfig, get_peft_model
    from gradian.model.core import attach_lora, _quiet_peft
    a = attach_lora(tiny(), r=2, target_modules=["q_proj", "v_proj"], seed=7, init="default")
    with _quiet_peft(): b = get_peft_model(tiny(), LoraConfig(r=2, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    U._seed_lora_(b, 7)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_backend_refuses_without_cuda_and_never_imports_unsloth():
    be = U.UnslothBackend()
    ok, why = be.status()
    assert not ok and "needs a CUDA GPU" in why
    with pytest.raises(GradianError, match="needs a CUDA GPU") as e:
        be.train("embedded", None, [], None)
    assert "--backend hf or trl" in str(e.value)
    assert "unsloth" not in sys.modules


def test_unsloth_reads_the_dequantized_cache_for_gguf(smol_path):
    from pathlib import Path
    src = Path(U._unsloth_source("embedded"))
    assert src.is_dir() and (src / "config.json").is_file() and (src / "model.safetensors").is_file()
    assert U._unsloth_source(smol_path) == str(src)
    assert U._unsloth_source("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
