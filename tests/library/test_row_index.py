"""The index room over a library file (`dsonet.library.index.row_index`), opened on the file as a library's
open does: its ranking is the code index's search, then exact rescoring from the floats the file holds."""

from contextlib import closing

import numpy as np

from dsonet.codec import Profile, make_batch
from dsonet.library import Library
from dsonet.library.index.row_index import OVERSAMPLE, RESCORE, RowIndex
from dsonet.library.store.rows import RowStore
from lib_helpers import experiences, unit

DIM = 2048


class _NoEncoder:
    """The rows arrive as peers' codes; nothing is encoded."""

    dim = DIM
    id = "test:low-rank"

    def encode(self, texts, kind="document"):
        raise AssertionError("peers' rows are not encoded")


def test_a_nodes_ranking_of_peers_codes_is_the_index_search_with_stage_2b(tmp_path, identity):
    """`RowIndex.rank` (`Library.rank`), what a node's search runs over rows it holds only as codes, is
    `CodeIndex.search` with the consistency step of its best candidates (stage 2b): the same
    rows and scores, no other path."""
    lift = np.linalg.qr(np.random.default_rng(1).standard_normal((DIM, 48)))[0].T.astype(np.float32)
    z = np.random.default_rng(2).standard_normal((2100, 48)).astype(np.float32) / np.sqrt(np.arange(1, 49, dtype=np.float32))
    z[:, 0] += 1.0
    x = (z / np.linalg.norm(z, axis=1, keepdims=True)) @ lift  # embedding-like: few directions, a shared mean
    profile = Profile(DIM, DIM, _NoEncoder.id, rotation_seed=3)
    exps = experiences(len(x))
    with Library(tmp_path / "peers.sqlite", encoder=_NoEncoder(), profile=profile) as lib:
        for part in np.array_split(np.arange(len(x)), 3):
            assert lib.ingest(make_batch([exps[i] for i in part], x[part], profile, identity)).rejected == 0
    with closing(RowStore(tmp_path / "peers.sqlite")) as store:
        rows_index = RowIndex(store, profile)
        index = rows_index.index
        assert index.subspace is not None and len(index.subspace.codes) > 0
        for q in x[[5, 900, 2000]]:
            rows, scores = rows_index.rank(q, 10)
            expected_rows, expected_scores = index.search(q, 10, OVERSAMPLE)
            np.testing.assert_array_equal(rows, expected_rows)
            np.testing.assert_allclose(scores, expected_scores, atol=1e-6)
            assert not np.allclose(scores[:20], np.sort(index.score(q, rows[:20]))[::-1])  # the step moved them


def test_held_floats_are_read_from_the_file_to_rescore_only_the_best_candidates(tmp_path, encoder, profile):
    exps, vecs = experiences(300), unit(300, seed=3)
    q = vecs[11] + 0.5 * vecs[12]
    q /= np.linalg.norm(q)
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile) as lib:
        lib.add_vectors(exps, vecs)
    with closing(RowStore(tmp_path / "lib.sqlite")) as store:
        index = RowIndex(store, profile)  # which rows are held comes from the file
        rows, scores = index.rank(q, 10)
        exact = vecs @ q
        ids = {e.id: i for i, e in enumerate(exps)}
        truth = np.array([exact[ids[index.ids[r]]] for r in rows])
        rescored = np.isclose(scores, truth, atol=1e-6)
        assert rescored.sum() == RESCORE  # exactly the best RESCORE candidates, and no others
        assert list(rows[:2]) == index.rows_of(exps[11].id) + index.rows_of(exps[12].id)
        assert np.all(np.diff(scores) <= 0)
        assert np.allclose(index.vectors(np.array(index.rows_of(exps[5].id)))[0], vecs[5])  # the float, from the file
