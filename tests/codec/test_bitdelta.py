import numpy as np
import pytest

from dsonet.codec import bytes_per_vector, compress, compression_ratio, decompress, pack_signs, unpack_signs
from dsonet.codec.bitdelta import decompress_deltas
from dsonet.errors import CodecError


def _random(m=64, d=768, seed=0):
    return np.random.default_rng(seed).standard_normal((m, d)).astype(np.float32)


def test_sizes_match_the_paper():
    assert bytes_per_vector(7680, 7680) == 964
    assert bytes_per_vector(768, 128) == 120
    assert 7680 * 4 / 964 == pytest.approx(31.87, abs=0.005)
    codes = compress(_random(3, 7680), 7680)
    assert codes.signs.nbytes / 3 + codes.scales.nbytes / 3 == 964


@pytest.mark.parametrize("g", [32, 64, 128, 256])
def test_ratio_is_32g_over_g_plus_32(g):
    assert 768 * 4 / bytes_per_vector(768, g) == pytest.approx(compression_ratio(g))
    assert compression_ratio(g) == pytest.approx(32 * g / (g + 32))


@pytest.mark.parametrize("d,g", [(768, 128), (768, 768), (384, 32), (96, 12), (40, 40)])
def test_reconstruction_follows_the_algorithm(d, g):
    e = _random(32, d, seed=d + g)
    codes = compress(e, g)
    base = e.mean(0)
    delta = (e - base).reshape(32, d // g, g)
    alpha = np.abs(delta).mean(-1)
    expected = base + (alpha[:, :, None] * np.where(delta >= 0, 1.0, -1.0)).reshape(32, d)
    np.testing.assert_allclose(codes.baseline, base, atol=1e-6)
    np.testing.assert_allclose(codes.scales, alpha, rtol=1e-5)
    np.testing.assert_allclose(decompress(codes), expected, atol=1e-5)


def test_scale_minimises_squared_error_of_each_group():
    e = _random(16, 256, seed=1)
    codes = compress(e, 64)
    delta = (e - codes.baseline).reshape(16, 4, 64)
    signs = unpack_signs(codes.signs, 64)
    alphas = codes.scales[:, :, None] * np.array([0.9, 0.99, 1.0, 1.01, 1.1])  # (16, 4, 5)
    err = ((delta[:, :, None, :] - alphas[..., None] * signs[:, :, None, :]) ** 2).sum(-1)
    assert (err.argmin(-1) == 2).all()


def _check_theorem(e, g):
    codes = compress(e, g)
    delta = (e - codes.baseline).reshape(len(e), -1, g)
    err = ((delta - decompress_deltas(codes).reshape(delta.shape)) ** 2).sum(-1)
    np.testing.assert_allclose(err, g * np.abs(delta).var(-1), rtol=1e-3, atol=1e-7)


def test_squared_error_is_g_times_variance_of_abs_delta_on_random_vectors():
    _check_theorem(_random(32, 768, seed=2).astype(np.float64).astype(np.float32), 128)


@pytest.mark.slow
def test_squared_error_is_g_times_variance_of_abs_delta_on_real_embeddings(minilm):
    from dsonet.data import gsm8k

    e = minilm.encode([item.question for item in gsm8k()[:200]])
    for g in (32, 128, 384):
        _check_theorem(e, g)


def test_sign_of_zero_is_plus_one_and_bits_are_little_endian():
    e = np.zeros((2, 64), dtype=np.float32)
    e[0, 0] = -1.0  # bit 0 of word 0 clear for row 0
    e[1, 33] = -1.0  # bit 1 of word 1 clear for row 1
    codes = compress(e, 64, baseline=np.zeros(64, np.float32))
    assert codes.signs.dtype == np.dtype("<u4")
    assert codes.signs[0, 0, 0] == 0xFFFFFFFE and codes.signs[0, 0, 1] == 0xFFFFFFFF
    assert codes.signs[1, 0, 0] == 0xFFFFFFFF and codes.signs[1, 0, 1] == 0xFFFFFFFD


@pytest.mark.parametrize("g", [1, 7, 32, 33, 100])
def test_bit_packing_round_trips_exactly(g):
    bits = np.random.default_rng(g).random((5, 3, g)) < 0.5
    words = pack_signs(bits)
    assert words.shape == (5, 3, -(-g // 32))
    np.testing.assert_array_equal(unpack_signs(words, g) > 0, bits)


def test_large_batches_are_chunked_without_changing_the_result():
    e = _random(600, 96, seed=5)
    whole = compress(e, 32)
    parts = [compress(e[i : i + 100], 32, baseline=whole.baseline) for i in range(0, 600, 100)]
    np.testing.assert_array_equal(whole.signs, np.concatenate([p.signs for p in parts]))
    np.testing.assert_allclose(whole.scales, np.concatenate([p.scales for p in parts]), rtol=1e-6)


def test_rotated_codes_have_the_same_size_and_round_trip_the_baseline():
    e = _random(40, 7680, seed=6)
    plain, rotated = compress(e, 7680), compress(e, 7680, rotation_seed=7)
    assert rotated.bytes_per_vector == plain.bytes_per_vector == 964
    assert rotated.signs.shape == plain.signs.shape
    rec = decompress(rotated)
    cos = (rec * e).sum(1) / np.linalg.norm(rec, axis=1) / np.linalg.norm(e, axis=1)
    assert cos.min() > 0.75  # 1-bit codes of isotropic noise keep about sqrt(2/pi) of the direction


def test_rotation_helps_vectors_with_a_few_loud_coordinates():
    rng = np.random.default_rng(8)
    e = rng.standard_normal((200, 384)).astype(np.float32) * 0.1
    e[:, :4] += rng.standard_normal((200, 4)).astype(np.float32) * 3.0  # outlier dimensions
    err = {}
    for seed in (None, 11):
        rec = decompress(compress(e, 384, rotation_seed=seed))
        err[seed] = np.linalg.norm(rec - e) / np.linalg.norm(e - e.mean(0))
    assert err[11] < 0.8 * err[None]


@pytest.mark.parametrize(
    "bad,message",
    [
        (np.zeros((4, 10), np.float32), "group_size must divide"),
        (np.zeros(8, np.float32), "2-D"),
        (np.zeros((0, 8), np.float32), "non-empty"),
        (np.zeros((2, 8), np.int32), "floating point"),
    ],
)
def test_bad_input_raises_a_codec_error_naming_the_problem(bad, message):
    with pytest.raises(CodecError, match=message):
        compress(bad, 8 if bad.ndim == 2 and bad.shape[1] != 10 else 4)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected_with_their_position(value):
    e = _random(300, 64)
    e[270, 5] = value
    with pytest.raises(CodecError, match="row 270, column 5"):
        compress(e, 32)


def test_baseline_of_the_wrong_shape_is_rejected():
    with pytest.raises(CodecError, match=r"baseline must have shape \(64,\)"):
        compress(_random(3, 64), 32, baseline=np.zeros(32, np.float32))
