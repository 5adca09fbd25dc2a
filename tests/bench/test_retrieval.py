import numpy as np

from dsonet.bench.retrieval import Corpus


def test_corpus_rows_do_not_depend_on_how_the_range_is_cut():
    # the library is built a batch at a time and the exact top-10 a large chunk at a time: both must
    # see the same synthetic rows, or recall is measured against vectors the index never held
    real = np.random.default_rng(0).standard_normal((2500, 16)).astype(np.float32)
    corpus = Corpus(real)
    whole = corpus.chunk(0, 9000)
    assert np.array_equal(whole[:2500], real)
    for cuts in ([0, 1000, 2000, 3000, 9000], [0, 2499, 2500, 2501, 4123, 7777, 9000], list(range(0, 9001, 100))):
        parts = np.concatenate([corpus.chunk(a, b) for a, b in zip(cuts, cuts[1:])])
        assert np.array_equal(parts, whole)
    assert np.allclose(np.linalg.norm(whole[2500:], axis=1), 1.0, atol=1e-5)


def test_running_top_k_over_chunks_is_the_exact_top_k():
    from dsonet.bench.retrieval import _TopK

    scores = np.random.default_rng(1).standard_normal((5, 3000)).astype(np.float32)
    top = _TopK(5, 10)
    for start in range(0, 3000, 700):
        top.update(scores[:, start : start + 700], start)
    exact = np.argsort(-scores, axis=1)[:, :10]
    assert all(set(a) == set(b) for a, b in zip(top.rows.tolist(), exact.tolist()))
