import numpy as np
import pytest

from dsonet.codec import compress, decompress
from dsonet.library.index.code_index import CodeIndex
from lib_helpers import unit


@pytest.mark.parametrize("group_size, seed", [(384, None), (96, None), (48, 7), (384, 7)])
def test_asymmetric_score_equals_cosine_with_the_reconstruction(group_size, seed):
    x, q = unit(200, 1), unit(1, 2)[0]
    index = CodeIndex(384, group_size, seed)
    for part in (x[:120], x[120:]):  # two batches, two baselines
        codes = compress(part, group_size, rotation_seed=seed)
        b = index.add_baseline(codes.baseline)
        index.add(codes.signs, codes.scales, np.full(len(part), b, np.int32))
    codes = [compress(p, group_size, rotation_seed=seed) for p in (x[:120], x[120:])]
    recon = np.concatenate([decompress(c) for c in codes])
    base = np.concatenate([np.repeat(c.baseline[None, :], len(c), 0) for c in codes])
    # unit vectors: κ rescales Δ̂ so that ‖ē + κΔ̂‖ = 1 to first order (1 = ‖ē‖² + 2κ ē·Δ̂ + κ‖Δ̂‖²)
    kappa = (1 - (base * base).sum(1)) / ((recon * recon).sum(1) - (base * base).sum(1))
    expected = base @ q + kappa * (recon @ q - base @ q)
    np.testing.assert_allclose(index.score(q, np.arange(200)), np.clip(expected, -1, 1), atol=1e-5)
    np.testing.assert_allclose(index.reconstruct(np.arange(200)), recon, atol=1e-5)


def test_the_correction_halves_the_error_on_embedding_like_vectors():
    """Unit vectors of low intrinsic dimension in many coordinates, as embeddings are: the
    1-bit noise is spread over all coordinates and κ removes the shrinkage that remains."""
    lift = np.linalg.qr(np.random.default_rng(1).standard_normal((1536, 48)))[0].T.astype(np.float32)
    x, queries = unit(2000, 4, dim=48) @ lift, unit(50, 5, dim=48) @ lift
    index = CodeIndex(1536, 1536, 3)
    codes = compress(x, 1536, rotation_seed=3)
    index.add(codes.signs, codes.scales, np.full(len(x), index.add_baseline(codes.baseline), np.int32))
    recon = decompress(codes)
    plain = np.stack([recon @ q / np.linalg.norm(recon, axis=1) for q in queries])  # cosine with ê
    ours = np.stack([index.score(q) for q in queries])
    truth = queries @ x.T
    assert np.abs(ours - truth).mean() < 0.6 * np.abs(plain - truth).mean()


def test_support_decoding_cuts_the_error_of_the_best_candidates():
    """Stage 3: vectors in a known 48-dim subspace of 1536 coordinates, decoded consistently with
    their signs inside it, are scored closer to the truth than by the κ estimate, and rank better."""
    lift = np.linalg.qr(np.random.default_rng(1).standard_normal((1536, 48)))[0].T.astype(np.float32)
    x, queries = unit(2000, 4, dim=48) @ lift, unit(50, 5, dim=48) @ lift
    index = CodeIndex(1536, 1536, 3, support=lift * 2.0)  # any spanning set: it is orthonormalised
    codes = compress(x, 1536, rotation_seed=3)
    index.add(codes.signs, codes.scales, np.full(len(x), index.add_baseline(codes.baseline), np.int32))
    truth = queries @ x.T
    err_plain, err_refined, hits_plain, hits_refined = [], [], 0, 0
    for q, t in zip(queries, truth):
        rows = np.argsort(-index.score(q))[:16]
        err_plain.append(np.abs(index.score(q, rows) - t[rows]).mean())
        err_refined.append(np.abs(index.support.score(index, q, index.rotate(q), rows) - t[rows]).mean())
        best = set(np.argsort(-t)[:10].tolist())
        hits_plain += len(best & set(index.search(q, 10, 64, refine=False)[0][:10].tolist()))
        hits_refined += len(best & set(index.search(q, 10, 64)[0][:10].tolist()))
    assert np.mean(err_refined) < 0.6 * np.mean(err_plain)
    assert hits_refined > hits_plain


@pytest.mark.parametrize("support, says", [(np.ones((4, 100)), "expected"), (np.full((4, 384), np.nan), "NaN")])
def test_a_bad_support_is_a_clear_error(support, says):
    with pytest.raises(ValueError, match=says):
        CodeIndex(384, 384, 7, support=support)


def test_large_libraries_search_through_the_sketch_and_find_what_a_full_scan_finds():
    x = unit(20_000, 6, dim=96)
    index = CodeIndex(96, 32, 7)
    for part in np.array_split(x, 6):  # six batches: six baselines, the sketch fitted past 16,384 rows
        codes = compress(part, 32, rotation_seed=7)
        index.add(codes.signs, codes.scales, np.full(len(part), index.add_baseline(codes.baseline), np.int32))
    assert index.sketch is not None and index.sketch.n == 20_000
    overlap = []
    for q in x[:40]:
        full = np.argsort(-index.score(q))[:10]
        found, _ = index.search(q, 10, 2000)
        overlap.append(len(set(found[:10]) & set(full)) / 10)
        assert found[0] == np.argmax(x @ q)  # the query's own row
    assert np.mean(overlap) >= 0.95


def test_search_skips_removed_rows_and_respects_the_allowed_mask():
    x = unit(500, 3)
    codes = compress(x, 384)
    index = CodeIndex(384, 384, None)
    index.add(codes.signs, codes.scales, np.full(500, index.add_baseline(codes.baseline), np.int32))
    rows, _ = index.search(x[10], 5, 64)
    assert rows[0] == 10
    index.remove(np.array([10]))
    assert 10 not in index.search(x[10], 5, 64)[0]
    allowed = np.zeros(500, bool)
    allowed[400:] = True
    assert (index.search(x[10], 5, 64, allowed)[0] >= 400).all()


def _low_rank(n: int, seed: int, lift: np.ndarray) -> np.ndarray:
    """Unit vectors in the 48 directions ``lift`` spans, with a shared mean and a decaying spectrum, as embeddings."""
    z = np.random.default_rng(seed).standard_normal((n, 48)).astype(np.float32) / np.sqrt(np.arange(1, 49, dtype=np.float32))
    z[:, 0] += 1.0
    return (z / np.linalg.norm(z, axis=1, keepdims=True)) @ lift


def test_stage_2b_runs_where_the_deltas_lie_in_few_directions_and_not_in_a_flat_space():
    """The consistency step is only as good as the directions learned from the codes: it turns on
    where the top `SUBSPACE_DIM` hold nearly all of the deltas' signal, not where they hold a fraction."""
    from dsonet.library.index.stages import SUBSPACE_DIM, SUBSPACE_SHARE

    lift = np.linalg.qr(np.random.default_rng(1).standard_normal((2048, 48)))[0].T.astype(np.float32)
    for x, on in ((_low_rank(2100, 2, lift), True), (unit(2100, 3, dim=2048), False)):
        index = CodeIndex(2048, 2048, 3)
        codes = compress(x, 2048, rotation_seed=3)
        index.add(codes.signs, codes.scales, np.full(len(x), index.add_baseline(codes.baseline), np.int32))
        assert (index.subspace.held >= SUBSPACE_SHARE) is on and index.subspace.on is on
        assert index.subspace.codes.shape == (SUBSPACE_DIM, 2048)  # kept when off too: they tell drift
        q = x[7]
        rows, scores = index.search(q, 10, 64)
        assert rows[0] == 7 and np.all(np.diff(scores) <= 0)
        if on:  # the best candidates' estimates moved, the others kept the κ estimate
            assert not np.allclose(scores[:20], np.sort(index.score(q, rows[:20]))[::-1])
            np.testing.assert_allclose(scores[20:], index.score(q, rows[20:]), atol=1e-6)


def test_small_spaces_and_small_libraries_keep_the_linear_estimate():
    lift = np.linalg.qr(np.random.default_rng(1).standard_normal((2048, 48)))[0].T.astype(np.float32)
    for dim, x in ((384, unit(3000, 4)), (2048, _low_rank(1500, 5, lift))):  # d < 8·K; fewer rows than a fit needs
        index = CodeIndex(dim, dim, 3)
        codes = compress(x, dim, rotation_seed=3)
        index.add(codes.signs, codes.scales, np.full(len(x), index.add_baseline(codes.baseline), np.int32))
        assert index.subspace is None

