import numpy as np
import pytest

from dsonet.encoders.align import Adapter, AlignedEncoder, fit_adapter, fit_procrustes, fit_ridge, held_out_score
from dsonet.encoders.base import EncoderError, l2_normalise
from dsonet.encoders.wordllama import WordLlamaEncoder

RNG = np.random.default_rng(0)


def _rotated(n=300, d_in=16, d_out=24):
    x = l2_normalise(RNG.standard_normal((n, d_in)))
    rot, _ = np.linalg.qr(RNG.standard_normal((d_out, d_in)))  # (d_out, d_in), orthonormal columns
    return x, x @ rot.T


def test_procrustes_recovers_a_rotation_exactly():
    x, y = _rotated()
    arrays = fit_procrustes(x, y)
    np.testing.assert_allclose(x @ arrays["w"] + arrays["b"], y, atol=1e-4)


def test_ridge_recovers_a_linear_map_with_bias():
    x = RNG.standard_normal((400, 8)).astype(np.float32)
    w, b = RNG.standard_normal((8, 5)), RNG.standard_normal(5)
    arrays = fit_ridge(x, x @ w + b, alpha=1e-6)
    np.testing.assert_allclose(arrays["w"], w, atol=1e-3)
    np.testing.assert_allclose(arrays["b"], b, atol=1e-3)


def test_fit_adapter_scores_every_method_and_keeps_the_best():
    x, y = _rotated()
    adapter = fit_adapter(x, y, "src", "dst")
    assert {"procrustes", "mlp"} <= set(adapter.scores) and any(k.startswith("ridge") for k in adapter.scores)
    chosen = [k for k, s in adapter.scores.items() if s["chosen"]]
    assert len(chosen) == 1 and adapter.scores[chosen[0]]["top1"] == max(s["top1"] for s in adapter.scores.values())
    assert held_out_score(adapter.apply(x), y)["top1"] == 1.0


def test_mlp_adapter_learns_a_nonlinear_map():
    x = l2_normalise(RNG.standard_normal((600, 12)))
    y = np.tanh(3 * x) @ RNG.standard_normal((12, 20))
    adapter = fit_adapter(x, y, "src", "dst", methods=["mlp"])
    assert held_out_score(adapter.apply(x[:100]), y[:100])["cosine"] > 0.9


def test_saved_adapter_loads_back_identically(tmp_path):
    x, y = _rotated()
    adapter = fit_adapter(x, y, "src", "dst", methods=["procrustes"])
    again = Adapter.load(adapter.save(tmp_path))
    np.testing.assert_array_equal(again.apply(x), adapter.apply(x))
    assert (again.source_id, again.target_id, again.method) == ("src", "dst", "procrustes")


@pytest.mark.slow
def test_aligned_wordllama_finds_minilm_documents(minilm):
    from dsonet.data import gsm8k
    from dsonet.encoders.cache import cached_encode

    items = gsm8k()[:400]
    anchors = [i.question for i in items[:300]] + [i.solution for i in items[:300]]
    wl = WordLlamaEncoder()
    adapter = fit_adapter(wl.encode(anchors), cached_encode(minilm, anchors), wl.id, minilm.id, methods=["ridge", "procrustes"])
    aligned = AlignedEncoder(wl, adapter)
    assert aligned.dim == 384 and aligned.target_id == minilm.id
    q = aligned.encode([i.question for i in items[300:]], kind="query")  # WordLlama queries...
    d = cached_encode(minilm, [i.solution for i in items[300:]])  # ...against MiniLM documents
    hits = ((q @ d.T).argsort(1)[:, ::-1][:, :10] == np.arange(100)[:, None]).any(1).mean()
    assert hits > 0.5  # chance is 0.1


def test_adapter_for_another_model_is_refused():
    x, y = _rotated(d_in=256, d_out=300)
    adapter = fit_adapter(x, y, "some-other-model", "dst", methods=["procrustes"])
    with pytest.raises(EncoderError, match="dso align"):
        AlignedEncoder(WordLlamaEncoder(), adapter)
