"""Shared fixtures: the real embedded model is loaded once per test session."""
import pytest


@pytest.fixture(scope="session")
def smol_path():
    from gradian.model.embedded import embedded_model_path
    return embedded_model_path()


@pytest.fixture(scope="session")
def smol_tokenizer(smol_path):
    from gradian.model.core import load_tokenizer
    return load_tokenizer(smol_path)


@pytest.fixture(scope="session")
def smol_model(smol_path):
    """(model, tokenizer) of the embedded model, loaded once (through the GGUF cache) and shared.
    Tests must not change it: attach LoRA to a `copy.deepcopy(model)` instead."""
    from gradian.model.core import load_model
    return load_model(smol_path)
