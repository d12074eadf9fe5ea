"""Batched per-example LoRA gradients on the real SmolLM2-135M-Instruct with a saved-and-reloaded PEFT adapter,
against the one-example-per-backward autograd reference (fp32, rtol 1e-4), under both padding sides."""
import copy

import pytest
import torch

from gradian.data import Example, tokenize_examples
from gradian.grads.capture import GradientCapture, pad_batch, supervised_losses
from gradian.grads.loss import per_example_ce
from gradian.model.core import attach_lora, load_model
from gradian.testing import reference_per_example_grads

CHATS = [("What is the capital of France?", "Paris."),
         ("Name a primary colour.", "Red is a primary colour, and so are blue and yellow."),
         ("Translate 'good morning' into Spanish.", "Buenos días."),
         ("Give me one sentence about the sea.", "The sea covers most of the planet and holds most of its water, salt and life."),
         ("2 + 2 = ?", "4")]


@pytest.fixture(scope="module")
def peft_model(smol_model, smol_path, tmp_path_factory):
    "The embedded model with a non-zero LoRA on all seven projection types, saved with save_pretrained and loaded back by PEFT."
    model, tok = smol_model
    pm = attach_lora(copy.deepcopy(model), r=4, alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], seed=3)
    d = tmp_path_factory.mktemp("adapter")
    pm.save_pretrained(d)
    from peft import PeftModel
    from gradian.model.core import _quiet_peft
    with _quiet_peft(): loaded = PeftModel.from_pretrained(copy.deepcopy(model), str(d)).eval()
    return loaded, tok


@pytest.fixture(scope="module")
def tokenized(peft_model):
    _, tok = peft_model
    exs = [Example(f"c{i}", [{"role": "user", "content": q}, {"role": "assistant", "content": a}]) for i, (q, a) in enumerate(CHATS)]
    ts = tokenize_examples(exs, tok)
    assert len({len(t.input_ids) for t in ts}) == len(ts)      # the batch really mixes lengths
    return ts


@pytest.fixture(scope="module")
def reference(peft_model, tokenized):
    model, _ = peft_model
    cap = GradientCapture(model)
    return cap, reference_per_example_grads(model, tokenized, cap.blocks)


@pytest.mark.parametrize("side", ["left", "right"])
def test_batched_equals_naive_reference(peft_model, tokenized, reference, side):
    model, tok = peft_model
    cap, ref = reference
    assert len(cap.blocks) == 30 * 7 * 2
    G, losses, _ = cap(pad_batch(tokenized, tok.pad_token_id, side))
    assert torch.isfinite(G).all()
    assert torch.allclose(G, ref, rtol=1e-4, atol=1e-5 * ref.abs().max().item()), (G - ref).abs().max()
    rel = ((G - ref).norm(dim=1) / ref.norm(dim=1)).max().item()
    assert rel < 1e-4, rel


def test_packed_logits_match_full_logits(peft_model, tokenized):
    "logits_to_keep with a boolean mask is honoured by the real model: the packed loss equals the full-logits loss."
    model, tok = peft_model
    b = pad_batch(tokenized, tok.pad_token_id, "left")
    with torch.no_grad():
        packed, reps = supervised_losses(model, b, want_reps=True)
        full = per_example_ce(model(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids).logits,
                              b.input_ids, b.supervised)
    assert torch.allclose(packed, full, rtol=1e-5)
    assert reps.shape == (len(tokenized), model.config.hidden_size) and torch.isfinite(reps).all()


def test_module_filter_on_real_model(peft_model, tokenized, reference):
    model, tok = peft_model
    cap, ref = reference
    capd = GradientCapture(model, module_filter="down_proj")
    assert len(capd.blocks) == 60 and all(b.module.endswith("mlp.down_proj") for b in capd.blocks)
    G, _, _ = capd(pad_batch(tokenized, tok.pad_token_id))
    cols = torch.cat([torch.arange(o, o + d) for b, o, d in zip(cap.blocks, cap.offsets, cap.dims) if b.module.endswith("down_proj")])
    assert torch.allclose(G, ref[:, cols], rtol=1e-4, atol=1e-5 * ref.abs().max().item())
