import numpy as np
import pytest

from dsonet.encoders.default import default_head_dir


@pytest.mark.slow
def test_default_encoder_is_minilm_plus_the_shipped_head_named_by_its_weights(default_encoder):
    assert default_encoder.dim == 7680
    assert default_encoder.id == f"st:all-MiniLM-L6-v2+zen7680:{default_encoder.head.digest()[:12]}"
    v = default_encoder.encode(["When a rate is given per hour, multiply by the hours.", "Divide the total by 4."])
    assert v.shape == (2, 7680)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)


def test_the_head_and_its_baseline_ship_in_the_package():
    path = default_head_dir()
    assert {"config.json", "model.safetensors", "baseline.safetensors"} <= {p.name for p in path.iterdir()}
    assert (path / "model.safetensors").stat().st_size < 5 * 2**20  # float16: 2.35M parameters


@pytest.mark.slow
def test_the_shipped_baseline_is_the_heads_mean_output(default_encoder):
    from dsonet.data import corpus_texts

    base = default_encoder.baseline
    assert base.shape == (7680,) and base.dtype == np.float32
    assert len(default_encoder.baseline_hash) == 64
    texts = corpus_texts()[::20]  # a sample of the packaged corpus it was averaged over
    mean = default_encoder.encode(texts).mean(0)
    assert mean @ base / (np.linalg.norm(mean) * np.linalg.norm(base)) > 0.98


@pytest.mark.slow
def test_default_encoder_keeps_related_texts_closer(default_encoder):
    a, b, c = default_encoder.encode(["How many apples are left after eating three?",
                                      "She had 10 apples and ate 3, so 7 are left.",
                                      "The train leaves the station at noon."])
    assert a @ b > a @ c + 0.1
