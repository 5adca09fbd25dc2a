"""The C kernels against plain numpy statements of the same maths."""

import numpy as np
import pytest

from dsonet.codec import compress, decompress, pack_signs
from dsonet.codec.bitdelta import _CHUNK_ROWS
from dsonet.codec.rotation import Rotation, _factor

# the compiled module itself; where the build left it out (DSONET_NO_KERNELS=1, no compiler, not x86-64)
# the numpy twins run instead and tests/codec/test_numpy_kernels.py pins them
_kernels = pytest.importorskip("dsonet.codec._kernels", reason="built without the C kernels")


def _random(m, d, seed=0):
    return np.random.default_rng(seed).standard_normal((m, d)).astype(np.float32)


@pytest.mark.parametrize("d,g", [(7680, 7680), (768, 128), (768, 32), (96, 48), (96, 12), (21, 7), (40, 40)])
def test_quantize_matches_numpy_bit_for_bit(d, g):
    """Both paths: AVX2 (g a multiple of 32) and scalar (any other g)."""
    e, base = _random(70, d, seed=d), _random(1, d, seed=1)[0]
    codes = compress(e, g, baseline=base)
    delta = (e - base).reshape(70, d // g, g)
    np.testing.assert_array_equal(codes.signs, pack_signs(delta >= 0))
    np.testing.assert_allclose(codes.scales, np.abs(delta).mean(-1), rtol=1e-5)


def test_sign_of_zero_is_plus_and_padding_bits_are_zero():
    e = np.zeros((2, 40), np.float32)
    codes = compress(e, 40, baseline=np.zeros(40, np.float32))
    assert codes.signs.tolist() == [[[0xFFFFFFFF, 0xFF]]] * 2  # 40 set bits, then 24 zero pad bits


def test_many_chunks_on_many_threads_give_the_same_codes_as_one_chunk():
    e = _random(3 * _CHUNK_ROWS + 5, 768, seed=2)
    whole = compress(e, 128, rotation_seed=3)
    for start in range(0, len(e), 17):
        part = compress(e[start : start + 17], 128, baseline=whole.baseline, rotation_seed=3)
        np.testing.assert_array_equal(part.signs, whole.signs[start : start + 17])
    np.testing.assert_array_equal(decompress(whole)[5:9], decompress(whole[5:9]))


def _dense(block: int, seed: int) -> np.ndarray:
    """R = (Q_m ⊗ H)·D written out as a matrix, with H built by Sylvester's doubling."""
    r = Rotation(block, seed)
    m, a, c = _factor(block)
    h = np.ones((1, 1))
    while len(h) < a * c:
        h = np.block([[h, h], [h, -h]])
    return np.kron(r.q.astype(np.float64), h / np.sqrt(a * c)) @ np.diag(r.signs)


@pytest.mark.parametrize("block", [1, 8, 12, 96, 384, 768])
def test_rotation_is_the_kronecker_product_it_claims(block):
    x = _random(5, block, seed=block)
    np.testing.assert_allclose(Rotation(block, 4).apply(x), x @ _dense(block, 4).T, atol=1e-5)


def test_rotated_bitdelta_rotates_each_group_by_itself():
    d, g = 768, 128
    x = _random(4, d, seed=9)
    blocks = Rotation(d, 4, block=g).apply(x).reshape(4, d // g, g)
    np.testing.assert_allclose(blocks, x.reshape(4, d // g, g) @ _dense(g, 4).T, atol=1e-5)


def test_kernels_reject_buffers_of_the_wrong_size():
    x, base = np.zeros((2, 64), np.float32), np.zeros(64, np.float32)
    signs, scales = np.zeros((2, 2), np.uint32), np.zeros((2, 1), np.float32)
    with pytest.raises(ValueError, match="signs"):
        _kernels.quantize(x, base, 2, 64, 64, signs[:1], scales)
    with pytest.raises(ValueError, match="base"):
        _kernels.quantize(x, base[:10], 2, 64, 64, signs, scales)
    with pytest.raises(ValueError, match="group_size"):
        _kernels.quantize(x, base, 2, 64, 48, signs, scales)
    with pytest.raises((ValueError, BufferError), match="contiguous"):
        _kernels.quantize(np.zeros((2, 128), np.float32)[:, ::2], base, 2, 64, 64, signs, scales)
    scales.flags.writeable = False
    with pytest.raises((ValueError, BufferError), match="read-only|not writable"):
        _kernels.quantize(x, base, 2, 64, 64, signs, scales)


def test_lookup_table_sums_match_numpy_over_chosen_rows():
    rng = np.random.default_rng(5)
    table = rng.standard_normal((24, 256)).astype(np.float32)  # 24 code bytes in 3 groups of 8
    codes = rng.integers(0, 256, (50, 24), dtype=np.uint8)
    rows = np.array([3, 49, 0, 3], np.int64)
    out = np.empty((4, 3), np.float32)
    _kernels.lut_sums(table, codes, 50, 24, rows, 3, out)
    expected = table[np.arange(24), codes[rows]].reshape(4, 3, 8).sum(-1)
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    with pytest.raises(IndexError, match="rows"):
        _kernels.lut_sums(table, codes, 50, 24, np.array([50], np.int64), 3, out[:1])
    with pytest.raises(TypeError, match="int64"):
        _kernels.lut_sums(table, codes, 50, 24, rows.astype(np.float64), 3, out)


@pytest.mark.parametrize("k", [64, 12])  # AVX2 path and scalar path
def test_int8_dot_matches_numpy(k):
    rng = np.random.default_rng(k)
    codes = rng.integers(-127, 128, (300, k), dtype=np.int8)
    q = rng.standard_normal(k).astype(np.float32)
    out = np.empty(300, np.float32)
    _kernels.int8_dot(codes, q, 300, k, out)
    np.testing.assert_allclose(out, codes.astype(np.float64) @ q, rtol=1e-4, atol=1e-3)


_SCALAR_CHECK = """
import numpy as np, sys
from dsonet.codec import _kernels, compress, decompress
from dsonet.aggregate.robust import mad_scores
from dsonet.library.index.code_index import CodeIndex
rng = np.random.default_rng(0)
x = rng.standard_normal((300, 768)).astype(np.float32)
codes = compress(x, 128, rotation_seed=5)
index = CodeIndex(768, 768, 5)
c = compress(x, 768, rotation_seed=5)
index.add(c.signs, c.scales, np.full(300, index.add_baseline(c.baseline), np.int32))
np.savez(sys.argv[1], simd=_kernels.simd(), signs=codes.signs, scales=codes.scales, rec=decompress(codes),
         scores=index.score(x[0]), mad=mad_scores(x, x[1], np.abs(x[2]) + 0.1, 1e-8))
"""


def test_scalar_paths_give_what_the_simd_paths_give(tmp_path):
    import subprocess
    import sys

    runs = {}
    for flag in ("0", "1"):
        out = tmp_path / f"run{flag}.npz"
        env = {**__import__("os").environ, "DSONET_KERNELS_SCALAR": flag}
        subprocess.run([sys.executable, "-c", _SCALAR_CHECK, str(out)], check=True, env=env)
        runs[flag] = np.load(out)
    assert str(runs["1"]["simd"]) == "scalar"
    np.testing.assert_array_equal(runs["0"]["signs"], runs["1"]["signs"])
    for name in ("scales", "rec", "scores", "mad"):
        np.testing.assert_allclose(runs["0"][name], runs["1"][name], rtol=1e-4, atol=1e-5)
