"""Refits of the index's sketch and subspace stage deferred to the owner (a node that searches
while it ingests): fitted apart from the writes, they give the index an eager refit gives, and the
rows written during the fit are covered (the node's turns on its lock: tests/network/test_ingest_turns.py)."""

import numpy as np
import pytest

from dsonet.codec import compress
from dsonet.library import Library
from dsonet.library.index import code_index
from dsonet.library.index.code_index import CodeIndex
from lib_helpers import experiences, small_index_thresholds, subspace_vectors, unit


@pytest.fixture
def small_thresholds(monkeypatch):
    small_index_thresholds(monkeypatch)


def _add(index: CodeIndex, x: np.ndarray) -> None:
    codes = compress(x, 32, rotation_seed=7)
    index.add(codes.signs, codes.scales, np.full(len(x), index.add_baseline(codes.baseline), np.int32))


def test_a_deferred_refit_installs_what_an_eager_one_fits(small_thresholds):
    x, queries = subspace_vectors(1500, 2), subspace_vectors(20, 3)
    eager, deferred = CodeIndex(96, 32, 7), CodeIndex(96, 32, 7, defer_refit=True)
    _add(eager, x)
    _add(deferred, x)
    assert eager.sketch is not None and len(eager.subspace.codes)
    assert deferred.sketch is None and deferred.subspace is None  # searches scan in full meanwhile
    unfitted = [deferred.search(q, 10, 40) for q in queries]
    due = deferred.refit_due()
    assert (due.rows, due.subspace, due.sketch) == (1500, True, True)
    deferred.install(deferred.fit(due))
    assert deferred.refit_due() is None
    for q in queries:
        rows, scores = deferred.search(q, 10, 40)
        want_rows, want_scores = eager.search(q, 10, 40)
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_allclose(scores, want_scores, atol=1e-6)
    truth = [set(np.argsort(-(x @ q))[:10].tolist()) for q in queries]
    recall = np.mean([len(t & set(r[:10].tolist())) / 10 for t, (r, _) in zip(truth, unfitted)])
    assert recall > 0.7  # what searches got before the fit was installed: a full scan, right if less sharp


def test_rows_written_while_the_fit_runs_are_sketched_when_it_is_installed(small_thresholds):
    index = CodeIndex(96, 32, 7, defer_refit=True)
    _add(index, subspace_vectors(1100, 4))
    due = index.refit_due()
    late = subspace_vectors(300, 5)
    _add(index, late)  # a write between "due" and the fit: a new baseline and 300 rows
    fitted = index.fit(due)
    assert fitted.sketch.n == 1100 and fitted.sketch.fitted_at == 1100
    index.install(fitted)
    assert index.sketch.n == index.n == 1400 and len(index.sketch.base_proj) == index.n_baselines == 2
    for i in (0, 150, 299):  # a late row is found through the sketch (the pool is far under 1,400 rows)
        rows, _ = index.search(late[i], 1, 40)
        assert rows[0] == 1100 + i


def test_an_eager_library_refits_as_it_writes(tmp_path, encoder, profile, monkeypatch):
    monkeypatch.setattr(code_index, "SKETCH_MIN_ROWS", 64)
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile) as lib:
        lib.add_vectors(experiences(100, seed=1), unit(100, 1))
        assert lib.search_index.index.sketch.n == 100
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile, defer_merge=True) as lib:
        assert lib.search_index.index.sketch.n == 100  # a deferring library opens fitted


def _spread(n: int, seed: int, topic: int) -> np.ndarray:
    """Unit vectors spread evenly over 32 directions of the 96 coordinates (one set of directions a
    topic): the top 8 hold a quarter of their signal, so the subspace stage is off."""
    lift = np.linalg.qr(np.random.default_rng(topic).standard_normal((96, 32)))[0].T.astype(np.float32)
    x = unit(n, seed, dim=32) @ lift
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_a_subspace_stage_that_is_off_is_fitted_again_only_where_the_codes_drifted(small_thresholds):
    """Grown ×4 on rows like those it was fitted on, an index whose subspace stage is off keeps its
    fit (a refit costs seconds at d = 7680 and would find it off again); grown on another topic,
    it fits again. A stage that is on is fitted again either way (the grown library's sample
    describes it better)."""
    for later, drifted in ((_spread(1800, 6, topic=1), False), (_spread(1800, 6, topic=2), True)):
        index = CodeIndex(96, 32, 7)
        _add(index, _spread(600, 5, topic=1))
        first = index.subspace
        assert first.fitted_at == 600 and not first.on
        _add(index, later)
        assert index.subspace.fitted_at == 2400 and index.refit_due() is None
        assert (index.subspace.codes is not first.codes) is drifted
        assert first.still_fits(index, 2400) is not drifted
    index = CodeIndex(96, 32, 7)
    _add(index, subspace_vectors(600, 5))
    first = index.subspace
    _add(index, subspace_vectors(1800, 6))
    assert first.on and not first.still_fits(index, 2400)
    assert index.subspace.fitted_at == 2400 and index.subspace.codes is not first.codes
