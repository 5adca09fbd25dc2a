"""A library that defers its merged view (a node searching while it ingests): new rows show
alone until the rebuild (`merge_jobs`, `build_merged`, `install_merged`), which then gives the same
clusters as the immediate view."""

import numpy as np

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from lib_helpers import DIM, experiences, unit


def _rebuild(lib: Library) -> None:
    jobs = lib.merge_jobs()
    lib.install_merged(jobs, lib.build_merged(jobs))


def _twins(profile):
    """Two signers' batches of the same three lessons, and a third lesson nearly the same as the first."""
    exps = experiences(3, "math")
    vectors = unit(3, seed=1)
    near = vectors[0] + 0.01 * unit(1, seed=9)[0]
    batches = [make_batch(exps, vectors, profile, NodeIdentity.from_seed(f"twin-{i}".encode())) for i in range(2)]
    close = make_batch([Experience("When case near, do the first step", "math", 0.5)],
                       (near / np.linalg.norm(near))[None, :], profile, NodeIdentity.from_seed(b"twin-near"))
    return batches + [close], vectors


def test_new_rows_show_alone_until_the_rebuild_then_merge_as_the_immediate_view_does(tmp_path, encoder, profile):
    batches, vectors = _twins(profile)
    with Library(tmp_path / "deferred.sqlite", encoder=encoder, profile=profile, defer_merge=True) as deferred, \
            Library(tmp_path / "now.sqlite", encoder=encoder, profile=profile) as now:
        for b in batches:
            deferred.ingest(b)
            now.ingest(b)
        before = deferred.search_vector(vectors[0], k=5, min_similarity=0.5)
        _rebuild(deferred)
        after = deferred.search_vector(vectors[0], k=5, min_similarity=0.5)
        expected = now.search_vector(vectors[0], k=5, min_similarity=0.5)
        assert len(before) == 3 and all(len(h.members) == 1 for h in before)  # three rows of one cluster, unmerged
        assert [(h.experience.id, h.members, h.sources) for h in after] == \
            [(h.experience.id, h.members, h.sources) for h in expected]
        assert len(after) == 1 and len(after[0].sources) == 3
        assert deferred.clusters() == now.clusters()


def test_members_evicted_after_the_rebuild_drop_out_of_their_cluster(tmp_path, encoder, profile):
    batches, vectors = _twins(profile)
    with Library(tmp_path / "deferred.sqlite", encoder=encoder, profile=profile, defer_merge=True) as lib:
        for b in batches:
            lib.ingest(b)
        _rebuild(lib)
        lib.rows.capacity = 5  # the next write evicts the three lowest-quality rows (a deferred write)
        other = make_batch(experiences(1, "math", seed=7), unit(1, seed=7), profile, NodeIdentity.from_seed(b"late"))
        evicted = lib.ingest(other).evicted
        live = lib.search_index.index.live
        clusters = [lib.view.cluster(r) for r in lib.search_index.live_rows().tolist()]
        hits = [h for v in vectors for h in lib.search_vector(v, k=5, min_similarity=0.5)]  # no evicted row read
        assert len(evicted) == 3 and hits and all(live[c].all() for c in clusters)
        assert DIM == profile.dim
