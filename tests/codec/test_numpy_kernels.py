"""The numpy kernels (used where the C extension is not built) give the C kernels' numbers."""

import numpy as np
import pytest

from dsonet.codec import _numpy_kernels as portable

c_kernels = pytest.importorskip("dsonet.codec._kernels")


@pytest.mark.parametrize("dim,g,with_base", [(384, 384, True), (256, 64, False), (96, 48, True)])
def test_quantize_and_dequantize_match(dim, g, with_base):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, dim)).astype(np.float32)
    base = rng.standard_normal(dim).astype(np.float32) if with_base else None
    words = -(-g // 32)
    out = [(np.zeros((9, dim // g, words), np.uint32), np.zeros((9, dim // g), np.float32)) for _ in range(2)]
    c_kernels.quantize(x, base, 9, dim, g, *out[0])
    portable.quantize(x, base, 9, dim, g, *out[1])
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-5)
    recon = [np.zeros((9, dim), np.float32) for _ in range(2)]
    c_kernels.dequantize(*out[0], base, 9, dim, g, recon[0])
    portable.dequantize(*out[0], base, 9, dim, g, recon[1])
    np.testing.assert_allclose(recon[0], recon[1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dim,block", [(7680, 7680), (384, 384), (256, 64)])
def test_rotate_and_unrotate_match(dim, block):
    from dsonet.codec.rotation import Rotation

    rot = Rotation(dim, 7, block)
    m, a, c = rot.shape
    rng = np.random.default_rng(1)
    x, base = rng.standard_normal((5, dim)).astype(np.float32), rng.standard_normal(dim).astype(np.float32)
    for kernel in ("rotate", "unrotate"):
        got = [np.zeros_like(x) for _ in range(2)]
        getattr(c_kernels, kernel)(x, base, 5, dim, m, a, c, rot.signs, rot.q, got[0])
        getattr(portable, kernel)(x, base, 5, dim, m, a, c, rot.signs, rot.q, got[1])
        np.testing.assert_allclose(got[0], got[1], rtol=1e-4, atol=1e-4)


def test_scans_match():
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 256, (50, 96), dtype=np.uint8)
    table = rng.standard_normal((96, 256)).astype(np.float32)
    rows = np.array([3, 0, 49, 7], np.int64)
    got = [np.zeros((4, 3), np.float32) for _ in range(2)]
    c_kernels.lut_sums(table, codes, 50, 96, rows, 3, got[0])
    portable.lut_sums(table, codes, 50, 96, rows, 3, got[1])
    np.testing.assert_allclose(got[0], got[1], rtol=1e-5, atol=1e-4)

    q8, q = rng.integers(-128, 128, (50, 64), dtype=np.int8), rng.standard_normal(64).astype(np.float32)
    dots = [np.zeros(50, np.float32) for _ in range(2)]
    c_kernels.int8_dot(q8, q, 50, 64, dots[0])
    portable.int8_dot(q8, q, 50, 64, dots[1])
    np.testing.assert_allclose(dots[0], dots[1], rtol=1e-4, atol=1e-3)

    x, center, w = (rng.standard_normal(s).astype(np.float32) for s in ((50, 64), 64, 64))
    l1 = [np.zeros(50, np.float32) for _ in range(2)]
    c_kernels.weighted_l1(x, center, np.abs(w), 50, 64, l1[0])
    portable.weighted_l1(x, center, np.abs(w), 50, 64, l1[1])
    np.testing.assert_allclose(l1[0], l1[1], rtol=1e-4)


def test_without_the_extension_the_codec_runs_on_numpy_with_the_same_codes(tmp_path):
    import subprocess
    import sys

    script = (
        "import sys, numpy as np; sys.modules['dsonet.codec._kernels'] = None\n"
        "from dsonet.codec import compress, kernels\n"
        "x = np.random.default_rng(3).standard_normal((4, 768)).astype(np.float32)\n"
        "c = compress(x, 768, rotation_seed=5)\n"
        "np.save(sys.argv[1], c.signs); print(kernels.BACKEND)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s.npy")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "numpy"
    from dsonet.codec import compress

    x = np.random.default_rng(3).standard_normal((4, 768)).astype(np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), compress(x, 768, rotation_seed=5).signs)
