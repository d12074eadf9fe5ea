"""The unsloth contract, on a CUDA machine with unsloth installed (see constraints/unsloth.txt):

1. train-then-analyse in one process: `gradian train --backend unsloth` finishes, the transformers classes are plain again
   afterwards, and the adapter loads and gives gradients through plain transformers in the same process;
2. same model and adapter: per-example LoRA gradients through the unsloth path (a model built by FastLanguageModel, put
   through `prepare_for_gradients` after `for_inference`) agree with the HF path.

Everything here is marked `gpu` and skips with the reason where CUDA or unsloth is missing. The parts of the shim that need
neither are tested on CPU in tests/test_unsloth_shim.py.

Run: pytest -m gpu tests/integration/test_unsloth_contract.py -rs"""
import importlib.util

import pytest
import torch


def _missing() -> str | None:
    if not torch.cuda.is_available(): return "needs a CUDA device: torch.cuda.is_available() is False on this machine"
    if importlib.util.find_spec("unsloth") is None: return "needs unsloth: pip install unsloth unsloth_zoo (within constraints/unsloth.txt)"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_missing() is not None, reason=_missing() or "")]

ROWS = [{"id": f"ex{i}", "prompt": f"What is {i % 8} plus {i // 8}?", "completion": f"{i % 8} plus {i // 8} is {i % 8 + i // 8}."} for i in range(32)]
SETTINGS = dict(r=4, alpha=8, target_modules=["q_proj", "v_proj"], lr=1e-3, batch_size=8, max_steps=4, logging_steps=1, seed=0, max_seq_length=128)


def _lora_grads(model, ids, sup):
    from gradian.grads.loss import per_example_ce
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    for p in params: p.requires_grad_(True)
    loss = per_example_ce(model(input_ids=ids).logits, ids, sup)[0]
    g = torch.autograd.grad(loss, params)
    return torch.cat([x.float().flatten() for x in g]), loss.item()


def _fixed_example():
    from gradian.data import load_train, tokenize_example
    from gradian.model.core import load_tokenizer
    ex = tokenize_example(load_train([{"prompt": "What is 3 plus 4?", "completion": "3 plus 4 is 7."}])[0], load_tokenizer("embedded"), 128)
    return torch.tensor([ex.input_ids], device="cuda"), torch.tensor([ex.supervised], device="cuda")


@pytest.fixture(scope="module")
def unsloth_adapter(tmp_path_factory):
    "Train with the unsloth backend through the facade (the same path as `gradian train --backend unsloth`)."
    from gradian.model.backends import train_adapter
    import transformers.models.llama.modeling_llama as ml
    plain = ml.LlamaAttention.forward
    res = train_adapter(ROWS, tmp_path_factory.mktemp("unsloth") / "adapter", model="embedded", backend="unsloth", dtype="float32", **SETTINGS)
    assert ml.LlamaAttention.forward is plain, "the unsloth patches were not undone after training"
    return res


def test_train_then_analyse_in_one_process(unsloth_adapter):
    from gradian.model.core import load_model
    res = unsloth_adapter
    assert res.manifest["backend"] == "unsloth" and res.manifest["versions"].get("unsloth")
    assert res.manifest["result"]["global_step"] == 4 and res.losses[-1] < res.losses[0]
    model, tok = load_model("embedded", adapter=res.out, device="cuda")        # plain transformers, same process
    g, loss = _lora_grads(model, *_fixed_example())
    assert torch.isfinite(g).all() and g.abs().sum() > 0 and loss > 0


def test_unsloth_and_hf_gradients_agree(unsloth_adapter):
    "Same base model and adapter: the gradients through unsloth's model (after prepare_for_gradients) match the HF path."
    from gradian.model.backends.unsloth import (_import_unsloth, _restore_modeling_forwards, _unsloth_source, gradient_state,
                                                prepare_for_gradients, snapshot_modeling_forwards, unsloth_compat_report)
    from gradian.model.core import load_model
    ids, sup = _fixed_example()
    hf_model, _ = load_model("embedded", adapter=unsloth_adapter.out, device="cuda")
    g_hf, loss_hf = _lora_grads(hf_model, ids, sup)
    del hf_model
    snap = snapshot_modeling_forwards()
    try:
        FLM = _import_unsloth()
        from peft import PeftModel
        base, _ = FLM.from_pretrained(model_name=_unsloth_source("embedded"), max_seq_length=128, dtype=torch.float32, load_in_4bit=False)
        model = PeftModel.from_pretrained(base, str(unsloth_adapter.out), is_trainable=True)
        FLM.for_inference(model)                       # the state a user leaves after generating with it
        assert not gradient_state(model)["ready"]
        prepare_for_gradients(model)
        assert unsloth_compat_report(model)["ready"]
        g_u, loss_u = _lora_grads(model, ids, sup)
    finally:
        _restore_modeling_forwards(snap)
    cos = torch.nn.functional.cosine_similarity(g_hf, g_u, dim=0).item()
    rel = ((g_hf - g_u).norm() / g_hf.norm()).item()
    print(f"\nloss hf {loss_hf:.6f} unsloth {loss_u:.6f}; gradient cosine {cos:.6f}, relative L2 difference {rel:.2e}")
    assert abs(loss_hf - loss_u) < 1e-3 * max(1.0, abs(loss_hf))
    assert cos > 0.999 and rel < 2e-2
