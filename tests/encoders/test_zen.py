import numpy as np
import pytest
import torch

from dsonet.encoders import EncoderError
from dsonet.encoders.zen import ZenHead, ZenReranker


def test_head_for_8192_dims_has_the_papers_97_531_392_linear_parameters():
    with torch.device("meta"):  # shapes only: no 390 MB allocation
        head = ZenHead(8192)
    assert head.d_hidden == 6144 and head.d_out == 7680
    assert head.linear_parameter_count() == 97_531_392


def test_head_width_follows_the_backbone():
    head = ZenHead(384)
    assert (head.d_in, head.d_hidden, head.d_out) == (384, 288, 7680)
    out = head(torch.randn(5, 384))
    assert out.shape == (5, 7680)
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(5))


def test_reranker_encodes_unit_vectors_in_7680_dims(minilm):
    enc = ZenReranker.for_backbone(minilm, seed=1)
    v = enc.encode(["When a price doubles, multiply by two.", "Count the apples first."], kind="query")
    assert v.shape == (2, 7680) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert enc.id == f"st:all-MiniLM-L6-v2+zen7680:{enc.head.digest()[:12]}"


def test_save_and_load_round_trip_gives_identical_vectors(tmp_path, minilm):
    enc = ZenReranker.for_backbone(minilm, seed=2)
    enc.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"config.json", "model.safetensors"}
    again = ZenReranker.from_pretrained(tmp_path)  # backbone rebuilt from config.json
    texts = ["Subtract the discount from the price."]
    np.testing.assert_array_equal(enc.encode(texts), again.encode(texts))
    assert again.id == enc.id


def test_id_names_the_weights_not_the_recipe(minilm):
    a, b = ZenReranker.for_backbone(minilm, seed=3), ZenReranker.for_backbone(minilm, seed=3)
    assert a.id == b.id  # same weights, same id
    with torch.no_grad():
        b.head.w2.bias[0] += 1e-6  # another machine's float rounding is another space
    assert ZenReranker(minilm, b.head).id != a.id
    assert ZenHead(384, tag="recipe-x").digest() != ZenHead(384, tag="recipe-x").digest()  # fresh random inits


def test_half_precision_weights_and_the_baseline_round_trip(tmp_path, minilm):
    enc = ZenReranker.for_backbone(minilm, seed=4)
    baseline = np.random.default_rng(0).standard_normal(7680).astype(np.float32) * 0.01
    ZenReranker(minilm, enc.head, baseline).save_pretrained(tmp_path, half=True)
    assert (tmp_path / "model.safetensors").stat().st_size < 2.5 * 2**20 * 2  # 2.35M parameters in 2 bytes each
    again = ZenReranker.from_pretrained(tmp_path, backbone=minilm)
    np.testing.assert_array_equal(again.baseline, baseline)
    assert again.baseline.dtype == np.float32 and again.baseline_hash == again.baseline_hash  # stable
    assert len(again.baseline_hash) == 64
    assert all(p.dtype == torch.float32 for p in again.head.parameters())  # widened for computing
    texts = ["Subtract the discount from the price.", "Count the apples first."]
    np.testing.assert_allclose(again.encode(texts), enc.encode(texts), atol=2e-3)
    assert again.id != enc.id  # rounded weights are other weights
    assert ZenReranker.for_backbone(minilm, seed=4).baseline is None


def test_a_baseline_of_the_wrong_shape_is_refused(minilm):
    with pytest.raises(EncoderError, match="baseline must be 7680"):
        ZenReranker(minilm, ZenHead(384), baseline=np.zeros(384, np.float32))


def test_head_that_does_not_fit_the_backbone_is_refused(minilm):
    with pytest.raises(EncoderError, match="d_in=512"):
        ZenReranker(minilm, ZenHead(512))


def test_missing_model_offline_says_how_to_fix_it(tmp_path):
    with pytest.raises(EncoderError, match="save_pretrained"):
        ZenReranker.from_pretrained(tmp_path / "nope")


def test_every_output_lies_in_the_heads_support():
    torch.manual_seed(0)
    head = ZenHead(16, 96, d_hidden=12)
    with torch.no_grad():  # LayerNorm's affine parameters away from their (1, 0) start
        head.ln2.weight.uniform_(0.5, 1.5)
        head.ln2.bias.normal_(0, 0.1)
    support = head.support()
    assert support.shape == (14, 96)
    e = head.project(np.random.default_rng(0).standard_normal((50, 16)).astype(np.float32))
    basis = np.linalg.qr(support.T.astype(np.float64))[0]
    residual = e - (e @ basis) @ basis.T
    assert np.abs(residual).max() < 1e-5
    # while a random unit vector keeps most of its length outside a 14-dim subspace of 96
    r = np.random.default_rng(1).standard_normal(96)
    assert np.linalg.norm(r - basis @ (basis.T @ r)) > 0.5 * np.linalg.norm(r)
