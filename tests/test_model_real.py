"""gradian.model.core on the real embedded model (SmolLM2-135M-Instruct from its GGUF)."""
import copy

import pytest
import torch

from gradian.core import GradianError
from gradian.model.core import (adapter_disabled, adapter_enabled, attach_lora, generate, gguf_cache,
                                load_model, lora_blocks)

PROMPTS = ["Hi!", "What is the capital of France?",
           "Write one sentence about why the sky looks blue during the day."]
TEXT = ["The quick brown fox jumps over the lazy dog.", "Paris is the capital of"]


def _logits(model, tok):
    enc = tok(TEXT, return_tensors="pt", padding=True)
    with torch.no_grad(): return model(**enc).logits


@pytest.fixture(scope="module")
def base_logits(smol_model):
    return _logits(*smol_model)


@pytest.fixture(scope="module")
def tuned(smol_model):
    "A deep copy of the shared model with a non-zero LoRA on q_proj and v_proj."
    model, tok = smol_model
    return attach_lora(copy.deepcopy(model), r=4, target_modules=["q_proj", "v_proj"], seed=1).eval()


def test_fixture_model_is_bare(smol_model):
    model, tok = smol_model
    with pytest.raises(GradianError, match="no LoRA blocks found: the adapter is not attached"):
        lora_blocks(model)
    assert not model.training


def test_disabled_adapter_is_exactly_the_base(smol_model, tuned, base_logits):
    tok = smol_model[1]
    on = _logits(tuned, tok)
    assert not torch.equal(on, base_logits)
    assert (on - base_logits).abs().max() > 1e-3
    with adapter_disabled(tuned):
        assert torch.equal(_logits(tuned, tok), base_logits)
        with adapter_enabled(tuned):
            assert torch.equal(_logits(tuned, tok), on)
        assert torch.equal(_logits(tuned, tok), base_logits)   # inner exit restored "off"
    assert torch.equal(_logits(tuned, tok), on)                # outer exit restored "on"
    assert torch.equal(_logits(smol_model[0], tok), base_logits)   # the shared model is untouched


def test_saved_adapter_round_trips(smol_model, smol_path, tuned, tmp_path):
    tok = smol_model[1]
    tuned.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    loaded, ltok = load_model(smol_path, adapter=tmp_path / "adapter")
    assert not loaded.training
    assert torch.equal(_logits(loaded, ltok), _logits(tuned, tok))
    with adapter_disabled(loaded):
        assert torch.equal(_logits(loaded, ltok), _logits(smol_model[0], tok))


def test_bad_adapter_folders(smol_path, tmp_path):
    with pytest.raises(GradianError, match="adapter folder not found"):
        load_model(smol_path, adapter=tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GradianError, match="adapter_config.json is missing") as e:
        load_model(smol_path, adapter=tmp_path / "empty")
    assert e.value.fix


def test_batched_generation_equals_one_at_a_time(smol_model):
    model, tok = smol_model
    side = tok.padding_side
    together = generate(model, tok, PROMPTS, max_new_tokens=16, batch_size=3)
    alone = [generate(model, tok, [p], max_new_tokens=16, batch_size=1)[0] for p in PROMPTS]
    assert together == alone
    assert tok.padding_side == side
    assert "Paris" in together[1]
    assert all("<|im_end|>" not in t and "<|im_start|>" not in t for t in together)


def test_batched_generation_with_adapter(smol_model, tuned):
    tok = smol_model[1]
    together = generate(tuned, tok, PROMPTS, max_new_tokens=8, batch_size=3)
    alone = [generate(tuned, tok, [p], max_new_tokens=8)[0] for p in PROMPTS]
    assert together == alone
    with adapter_disabled(tuned):
        assert generate(tuned, tok, PROMPTS[1:2], max_new_tokens=8) == generate(smol_model[0], tok, PROMPTS[1:2], max_new_tokens=8)


def test_lora_blocks_on_the_real_model(smol_model, tuned):
    n_layers = smol_model[0].config.num_hidden_layers
    assert n_layers == 30
    blocks = lora_blocks(tuned)
    modules = {b.module for b in blocks}
    assert len(modules) == 2 * n_layers and len(blocks) == 2 * len(modules)
    for m in modules:
        assert sorted(b.kind for b in blocks if b.module == m) == ["A", "B"]
    q_a = next(b for b in blocks if b.name == "model.layers.0.self_attn.q_proj.lora_A")
    hidden = smol_model[0].config.hidden_size
    assert q_a.shape == (4, hidden) and q_a.n_params == 4 * hidden
    assert tuned.get_submodule(q_a.path).weight.shape == q_a.shape
    v = lora_blocks(tuned, "v_proj")
    assert len(v) == len(blocks) // 2 and all(b.module.endswith("v_proj") for b in v)
    with pytest.raises(GradianError, match="matches none") as e:
        lora_blocks(tuned, "mlp\\.down_proj")
    assert "self_attn.q_proj" in str(e.value) and "self_attn.v_proj" in str(e.value)


def test_gguf_cache_equals_direct_load(smol_path, tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIAN_CACHE", str(tmp_path / "cache"))
    direct, dtok = load_model(smol_path, gguf_cache_ok=False)
    cached, ctok = load_model(smol_path)            # first load writes the cache, then reads it
    d = gguf_cache(smol_path)
    assert d.parent == tmp_path / "cache" / "gguf"
    assert {"config.json", "model.safetensors", "gradian_cache.json"} <= {p.name for p in d.iterdir()}
    assert not [p for p in d.parent.iterdir() if p.name.startswith(".")]    # no temp folder left behind
    assert cached.lm_head.weight is cached.model.embed_tokens.weight         # tie restored
    sd_direct, sd_cached = direct.state_dict(), cached.state_dict()
    assert sd_direct.keys() == sd_cached.keys()
    assert all(torch.equal(sd_direct[k], sd_cached[k]) for k in sd_direct)
    assert torch.equal(_logits(direct, dtok), _logits(cached, ctok))
    assert ctok.chat_template == dtok.chat_template
    assert ctok(TEXT)["input_ids"] == dtok(TEXT)["input_ids"]
    again, _ = load_model(smol_path)                # second load: cache hit, same weights
    assert torch.equal(_logits(again, ctok), _logits(direct, dtok))
