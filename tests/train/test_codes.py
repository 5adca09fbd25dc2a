import numpy as np
import torch

from dsonet.codec import compress, decompress
from dsonet.codec.batch import DEFAULT_ROTATION_SEED
from dsonet.codec.rotation import get_rotation
from dsonet.library.index.code_index import CodeIndex
from dsonet.train.codes import code_similarities, delta_cosine, reconstruction_cosine
from dsonet.train.rotation import TorchRotation

D = 7680


def _unit_rows(n: int, seed: int, shift: float = 0.0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32) + shift
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_torch_rotation_is_the_codecs_rotation():
    x = _unit_rows(4, 0)
    for dim, seed in ((D, DEFAULT_ROTATION_SEED), (384, 7), (512, 1)):
        ours = TorchRotation(dim, seed)(torch.from_numpy(x[:, :dim])).numpy()
        np.testing.assert_allclose(ours, get_rotation(dim, seed, dim).apply(x[:, :dim]), atol=2e-6)


def test_code_similarities_are_the_indexs_estimate_from_the_964_bytes():
    e, q = _unit_rows(40, 1, shift=0.02), _unit_rows(3, 2, shift=0.02)  # a common mean, as real spaces have
    baseline = e.mean(0)
    codes = compress(e, D, baseline=baseline, rotation_seed=DEFAULT_ROTATION_SEED)
    index = CodeIndex(D, D, DEFAULT_ROTATION_SEED)
    index.add(codes.signs, codes.scales, np.full(len(e), index.add_baseline(baseline), np.int32))
    ours = code_similarities(torch.from_numpy(q), torch.from_numpy(e), torch.from_numpy(baseline), TorchRotation(D, DEFAULT_ROTATION_SEED))
    np.testing.assert_allclose(ours.numpy(), np.stack([index.score(v) for v in q]), atol=1e-4)


def test_fidelity_matches_the_codecs_reconstruction():
    e = _unit_rows(20, 3, shift=0.02)
    baseline = e.mean(0)
    rec = decompress(compress(e, D, baseline=baseline, rotation_seed=DEFAULT_ROTATION_SEED))
    rotation = TorchRotation(D, DEFAULT_ROTATION_SEED)
    cos_e = (e * rec).sum(1) / np.linalg.norm(rec, axis=1)
    delta, delta_hat = e - baseline, rec - baseline
    cos_delta = (delta * delta_hat).sum(1) / np.linalg.norm(delta, axis=1) / np.linalg.norm(delta_hat, axis=1)
    tb = torch.from_numpy(baseline)
    np.testing.assert_allclose(reconstruction_cosine(torch.from_numpy(e), tb, rotation).numpy(), cos_e, atol=1e-4)
    np.testing.assert_allclose(delta_cosine(torch.from_numpy(e), tb, rotation).numpy(), cos_delta, atol=1e-4)
    assert abs(cos_delta.mean() - np.sqrt(2 / np.pi)) < 0.01  # a rotated Gaussian-like delta keeps √(2/π)
