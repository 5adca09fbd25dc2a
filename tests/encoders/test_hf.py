"""HFEncoder on a tiny randomly initialised Qwen3 (offline), with MiniLM's tokenizer."""

import numpy as np
import pytest

from dsonet.encoders.base import EncoderError
from dsonet.encoders.hf import HFEncoder
from dsonet.encoders.registry import load_encoder


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3Model

    from dsonet.encoders.sentence import minilm_path

    path = tmp_path_factory.mktemp("qwen3")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    config = Qwen3Config(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128)
    torch.manual_seed(0)
    Qwen3Model(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


TEXTS = ["Add the two numbers.", "When the question asks for a percentage, divide by the total and multiply by 100."]


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_encodes_unit_vectors_of_the_models_hidden_size(tiny_qwen3, pooling):
    enc = HFEncoder(tiny_qwen3, pooling=pooling)
    v = enc.encode(TEXTS)
    assert enc.dim == 32 and v.shape == (2, 32) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_last_token_pooling_ignores_padding_on_either_side(tiny_qwen3, side):
    enc = HFEncoder(tiny_qwen3, pooling="last")
    enc.tokenizer.padding_side = side
    together = enc.encode(TEXTS)  # the short text is padded
    alone = np.concatenate([enc.encode([t]) for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-4)


def test_query_instruction_changes_queries_only(tiny_qwen3):
    plain = HFEncoder(tiny_qwen3, pooling="last")
    instructed = HFEncoder(tiny_qwen3, pooling="last", query_instruction="Instruct: find the solution\nQuery:")
    np.testing.assert_allclose(plain.encode(TEXTS), instructed.encode(TEXTS), atol=1e-5)
    assert not np.allclose(plain.encode(TEXTS, kind="query"), instructed.encode(TEXTS, kind="query"), atol=1e-3)
    assert plain.id != instructed.id


def test_spec_string_selects_pooling(tiny_qwen3):
    enc = load_encoder(f"hf:{tiny_qwen3}?pooling=last")
    assert enc.pooling == "last" and enc.id.endswith(":last")


def test_unknown_pooling_and_missing_model_are_refused(tiny_qwen3, tmp_path):
    with pytest.raises(EncoderError, match="pooling"):
        HFEncoder(tiny_qwen3, pooling="cls")
    with pytest.raises(EncoderError, match="cannot load"):
        HFEncoder(str(tmp_path / "missing"))
