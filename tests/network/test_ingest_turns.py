"""The ingest room's turns on the library's lock: the index's refit and the merged view's rebuild
are computed without it, so a search (or a write) goes ahead meanwhile, and what is installed
after covers the writes made during the fit."""

import sys
import threading
from pathlib import Path

from dsonet.codec import Profile
from dsonet.library import Library
from dsonet.library.index import code_index as index_module
from dsonet.library.index.code_index import CodeIndex
from dsonet.network.ingest import rebuild_merged, refit_index

sys.path.insert(0, str(Path(__file__).parents[1] / "library"))
from lib_helpers import DIM, HashEncoder, experiences, unit  # noqa: E402


def test_the_library_refits_without_holding_the_lock(tmp_path, monkeypatch):
    """Ordered with events, not timed: while the fit runs, another thread takes the lock, searches
    and writes; the fit then installs and covers those writes."""
    monkeypatch.setattr(index_module, "SKETCH_MIN_ROWS", 64)
    started, release = threading.Event(), threading.Event()
    fit = CodeIndex.fit

    def held_fit(self, due):
        started.set()
        assert release.wait(30)
        return fit(self, due)

    monkeypatch.setattr(CodeIndex, "fit", held_fit)
    lock = threading.Lock()
    with Library(tmp_path / "lib.sqlite", encoder=HashEncoder(), profile=Profile(DIM, DIM, "test:hash"),
                 defer_merge=True) as lib:
        vectors = unit(100, 1)
        lib.add_vectors(experiences(100, seed=1), vectors)
        index = lib.search_index.index
        assert index.sketch is None and index.refit_due().sketch
        refit = threading.Thread(target=refit_index, args=(lib, lock))
        refit.start()
        assert started.wait(30)
        assert lock.acquire(timeout=30)  # free while the fit runs
        try:
            assert lib.search_vector(vectors[3], k=1, min_similarity=0.5)[0].score > 0.9  # the unfitted index answers
            late = unit(5, 2)
            late_ids = lib.add_vectors(experiences(5, seed=2), late)
        finally:
            lock.release()
        release.set()
        refit.join(30)
        assert not refit.is_alive() and index.sketch is not None
        assert index.sketch.n == index.n == 105 and index.refit_due() is None
        assert [lib.search_vector(v, k=1, min_similarity=0.5)[0].experience.id for v in late] == late_ids
        assert refit_index(lib, lock) is False  # nothing due: nothing fitted


def test_the_merged_view_is_built_without_holding_the_lock(tmp_path, monkeypatch):
    started, release = threading.Event(), threading.Event()
    lock = threading.Lock()
    with Library(tmp_path / "lib.sqlite", encoder=HashEncoder(), profile=Profile(DIM, DIM, "test:hash"),
                 defer_merge=True) as lib:
        vectors = unit(3, 1)
        lib.add_vectors(experiences(3, seed=1), vectors)
        build = lib.build_merged

        def held_build(jobs):
            started.set()
            assert release.wait(30)
            return build(jobs)

        monkeypatch.setattr(lib, "build_merged", held_build)
        merge = threading.Thread(target=rebuild_merged, args=(lib, lock))
        merge.start()
        assert started.wait(30)
        assert lock.acquire(timeout=30)  # free while the clusters are built
        try:
            assert lib.search_vector(vectors[0], k=1, min_similarity=0.5)[0].score > 0.9
        finally:
            lock.release()
        release.set()
        merge.join(30)
        assert not merge.is_alive() and not lock.locked()
        assert len(lib.clusters("general")) == 3 and lib.merge_jobs() == {}  # built, shown, nothing left to do
