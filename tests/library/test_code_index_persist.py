"""The index's fit is kept in the library file: an unchanged file opens without fitting and
searches exactly as it did, a change under the fit refits, and a file from before the table opens."""

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from lib_helpers import experiences, small_index_thresholds, subspace_vectors

from dsonet.codec import Profile
from dsonet.library import Library
from dsonet.library.index.code_index import CodeIndex

PROFILE = Profile(96, 32, "test:fits", rotation_seed=7)
OLD_FILE = Path(__file__).parent / "data" / "library-v1.sqlite"


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    small_index_thresholds(monkeypatch)


def _library(path: Path, n: int = 1200) -> np.ndarray:
    """A file of n rows (both stages due); returns the vectors, ids are experiences(n, seed=1)'s."""
    x = subspace_vectors(n, 1)
    with Library(path, profile=PROFILE) as lib:
        lib.add_vectors(experiences(n, seed=1), x)
    return x


def _ranking(lib: Library, queries: np.ndarray) -> list[tuple]:
    return [tuple((h.experience.id, round(h.score, 6)) for h in lib.search_vector(q, k=5, min_similarity=-1))
            for q in queries]


def _no_fit(monkeypatch):
    def refuse(self, due):
        raise AssertionError(f"fitted again: {due}")

    monkeypatch.setattr(CodeIndex, "fit", refuse)


def test_an_unchanged_library_opens_without_fitting_and_searches_the_same(tmp_path, monkeypatch):
    _library(tmp_path / "lib.sqlite")
    queries = subspace_vectors(20, 2)
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:  # fits once (the rows were fitted live) and keeps it
        assert lib.search_index.fits == {"subspace": "fitted", "sketch": "fitted"}
        before = _ranking(lib, queries)
        fitted = lib.search_index.index
    _no_fit(monkeypatch)
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        index = lib.search_index.index
        assert lib.search_index.fits == {"subspace": "restored", "sketch": "restored"}
        assert index.subspace.fitted_at == fitted.subspace.fitted_at == 1200 and len(index.subspace.codes) == 8
        np.testing.assert_array_equal(index.subspace.codes, fitted.subspace.codes)
        np.testing.assert_array_equal(index.sketch.codes[: index.n], fitted.sketch.codes[: fitted.n])
        assert _ranking(lib, queries) == before


def test_rows_added_past_the_fit_keep_it_until_the_refit_rule_says(tmp_path, monkeypatch):
    _library(tmp_path / "lib.sqlite")
    Library(tmp_path / "lib.sqlite", profile=PROFILE).close()  # fit and keep
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        lib.add_vectors(experiences(50, seed=3), subspace_vectors(50, 3))  # 1250 < 4 × 1200: no refit due
    _no_fit(monkeypatch)
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        assert lib.search_index.fits == {"subspace": "restored", "sketch": "restored"}
        assert lib.search_index.index.sketch.n == 1250  # the new rows are sketched by the kept fit


def test_a_row_deleted_under_the_fit_refits(tmp_path):
    _library(tmp_path / "lib.sqlite")
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        assert lib.delete(experiences(1200, seed=1)[10].id)
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        assert lib.search_index.fits == {"subspace": "fitted", "sketch": "fitted"}
        assert lib.search_index.index.subspace.fitted_at == 1199
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        assert lib.search_index.fits == {"subspace": "restored", "sketch": "restored"}


def test_a_file_without_saved_fits_opens_fits_and_keeps_them(tmp_path):
    _library(tmp_path / "lib.sqlite")
    Library(tmp_path / "lib.sqlite", profile=PROFILE).close()
    with sqlite3.connect(tmp_path / "lib.sqlite") as db:
        db.execute("DROP TABLE index_fits")  # as written before the index kept its fit
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        assert lib.search_index.fits == {"subspace": "fitted", "sketch": "fitted"}
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        assert lib.search_index.fits == {"subspace": "restored", "sketch": "restored"}


def test_the_schema_1_file_still_opens_and_searches(tmp_path):
    path = tmp_path / "old.sqlite"
    shutil.copy(OLD_FILE, path)
    with Library(path, encoder=None) as lib:
        assert lib.search_index.fits == {}  # too few rows for either stage: nothing to fit or keep
        (row,) = lib.search_index.live_rows()[:1]
        hit = lib.search_vector(lib.search_index.vectors(np.array([row]))[0], k=1, min_similarity=-1)[0]
        assert hit.experience.id == lib.search_index.ids[row]


def test_the_merged_views_clusters_are_kept_and_rebuilt_only_for_a_changed_domain(tmp_path, monkeypatch):
    from dsonet.library.view.merge import MergedView

    x = subspace_vectors(300, 4)
    near = x[:5] + 0.01 * subspace_vectors(5, 5)  # five near-duplicates: five clusters of two
    exps = experiences(300, seed=4) + experiences(5, seed=5, prefix="When near case")
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        lib.add_vectors(exps[:300], x)
        lib.add_vectors(exps[300:], near / np.linalg.norm(near, axis=1, keepdims=True))
        lib.add_vectors(experiences(20, domain="other", seed=6), subspace_vectors(20, 6))
        built = {d: sorted(map(tuple, (c.tolist() for c in lib.view.clusters(d)))) for d in ("general", "other")}
    assert sum(len(c) == 2 for c in built["general"]) == 5
    rebuilt = []
    build = MergedView.build
    monkeypatch.setattr(MergedView, "build", lambda self, rows: (rebuilt.append(len(rows)), build(self, rows))[1])
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        kept = {d: sorted(map(tuple, (c.tolist() for c in lib.view.clusters(d)))) for d in ("general", "other")}
        assert kept == built and rebuilt == []
        lib.add_vectors(experiences(1, domain="other", seed=7), subspace_vectors(1, 7))
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        assert len(lib.view.clusters("general")) == 300 and len(lib.view.clusters("other")) == 21
        assert rebuilt == [21]  # the changed domain only


def test_a_nodes_deferred_rebuild_and_refit_are_kept_too(tmp_path, monkeypatch):
    from dsonet.library.view.merge import MergedView

    with Library(tmp_path / "lib.sqlite", profile=PROFILE, defer_merge=True) as lib:
        lib.add_vectors(experiences(1200, seed=1), subspace_vectors(1200, 1))
        due = lib.refit_due()
        assert due.subspace and due.sketch  # both stages fell due: fitted apart, installed and kept
        lib.install_fit(due, lib.fit_index(due))
        jobs = lib.merge_jobs()
        lib.install_merged(jobs, lib.build_merged(jobs))
    _no_fit(monkeypatch)
    monkeypatch.setattr(MergedView, "build", lambda self, rows: pytest.fail("rebuilt the kept clusters"))
    with Library(tmp_path / "lib.sqlite", profile=PROFILE) as lib:
        assert lib.search_index.fits == {"subspace": "restored", "sketch": "restored"}
        assert len(lib.view.clusters("general")) == 1200
