"""Decoded once (issue 25): ê a round decoded reach the library's merge and reference pool with the
admitted rows, instead of being reconstructed from the codes again; the merged view is the same."""

import numpy as np
import pytest

from dsonet.codec import decompress, make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Admitted, Library, LibraryError
from dsonet.library.index.code_index import CodeIndex
from dsonet.library.view.decoded import RECENT

from lib_helpers import unit


def _batches(profile, n_batches: int = 4, rows: int = 30) -> list:
    """Batches from several signers with near-duplicates across them (the merge has clusters to find)."""
    base = unit(rows, seed=1, dim=profile.dim)
    out = []
    for b in range(n_batches):
        x = base + 0.003 * np.random.default_rng(10 + b).standard_normal(base.shape).astype(np.float32)
        exps = [Experience(f"When decoded case {b}-{i} comes, do step {i}.", "math") for i in range(rows)]
        out.append(make_batch(exps, x / np.linalg.norm(x, axis=1, keepdims=True), profile,
                              NodeIdentity.from_seed(f"decoded-{b}".encode())))
    return out


def _clusters(lib: Library) -> list[list[tuple[str, str]]]:
    idx = lib.search_index
    return sorted(sorted((idx.ids[r], idx.signers[r]) for r in c.tolist()) for c in lib.view.clusters())


def test_the_merge_clusters_the_rounds_own_decoding_and_finds_the_same_clusters(tmp_path, encoder, profile,
                                                                                   monkeypatch):
    batches = _batches(profile)
    keep = [np.arange(len(b)) % 7 != 3 for b in batches]  # some rows refused: ê of the admitted ones only
    decoded = [decompress(b.codes) for b in batches]  # as a node's round decodes them
    with Library(tmp_path / "plain.sqlite", encoder=encoder, profile=profile) as lib:
        for b, k in zip(batches, keep):
            lib.ingest(Admitted(b, k))
        plain = _clusters(lib)
    reconstructed = []
    real = CodeIndex.reconstruct
    monkeypatch.setattr(CodeIndex, "reconstruct", lambda self, rows: reconstructed.append(len(rows)) or real(self, rows))
    with Library(tmp_path / "handed.sqlite", encoder=encoder, profile=profile) as lib:
        for b, k, v in zip(batches, keep, decoded):
            lib.ingest(Admitted(b, k, decoded=v[k]))
        handed = _clusters(lib)
        with pytest.raises(LibraryError, match=r"decoded: shape \(30, 384\), expected \(26, 384\)"):
            lib.ingest(Admitted(batches[0], keep[0], decoded=decoded[0]))
    assert handed == plain and any(len(c) > 1 for c in handed)
    assert sum(reconstructed) == 0  # no row decoded a second time


def test_after_the_merge_only_the_newest_rows_stay_for_the_reference_pool(tmp_path, encoder, profile, monkeypatch):
    batches = _batches(profile, n_batches=20, rows=40)  # 800 rows: more than RECENT
    decoded = [decompress(b.codes) for b in batches]
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile, defer_merge=True,
                 trust=lambda signer: 1.0) as lib:
        for b, v in zip(batches, decoded):
            lib.ingest(Admitted(b, decoded=v))
        assert len(lib.decoded) == 800
        jobs = lib.merge_jobs()
        lib.install_merged(jobs, lib.build_merged(jobs))
        assert len(lib.decoded) == RECENT
        reconstructed = []
        real = CodeIndex.reconstruct
        monkeypatch.setattr(CodeIndex, "reconstruct",
                            lambda self, rows: reconstructed.append(len(rows)) or real(self, rows))
        reference = lib.reference_vectors(64, min_trust=0.5)  # the newest trusted rows, 16 a signer at most
        assert len(reference.vectors) == 64 and sum(reconstructed) == 0
        newest = batches[-1].experiences[::-1][:16]  # the last signer's newest rows come first
        rows = np.array([lib.search_index.rows_of(e.id)[0] for e in newest])
        assert np.array_equal(reference.scales[:16], lib.search_index.index.scales[rows])  # as stored, not recomputed
