"""The library's write path: rows into the file (`RowStore.write`: one transaction), then the index
following what the write handed back (it does not read the rows again) and the merged view told which
domains changed; a received batch's ê kept for the merge where its round decoded them."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from dsonet.codec import CompressedBatch, Profile
from dsonet.codec.batch import check_unit
from dsonet.errors import BatchError
from dsonet.experience import Experience, Provenance, check_lesson
from dsonet.library.errors import LibraryError
from dsonet.library.index.row_index import RowIndex
from dsonet.library.store import history
from dsonet.library.store import tags as tags_table
from dsonet.library.store.file import ANY_SIGNER
from dsonet.library.store.records import IngestResult, compressed
from dsonet.library.store.rows import RowStore
from dsonet.library.view.decoded import DecodedRows


class Writes:
    def __init__(self, rows: RowStore, index: RowIndex, decoded: DecodedRows, profile: Profile,
                 view_changed: Callable[[set[str]], None]):
        """``view_changed``: told the domains a write changed (the merged view rebuilds them now or later)."""
        self.rows, self.index, self.decoded, self.profile = rows, index, decoded, profile
        self.view_changed = view_changed

    def lesson(self, exp: Experience, tags: tuple[str, ...], encode: Callable[[list[str]], np.ndarray]) -> None:
        """`dsonet.library.Library.add`, once ``exp`` is made."""
        scopes = tags_table.checked(tags)
        self.own([exp], encode([exp.text]))
        tags_table.tag(self.rows.db, exp.id, scopes)

    def new_version(self, exp_id: str, text: str, domain: str | None,
                    encode: Callable[[list[str]], np.ndarray]) -> Experience:
        """`dsonet.library.Library.update`."""
        old = self.rows.get(exp_id)
        if old is None:
            raise LibraryError(f"exp_id: {exp_id!r} is not in the library (or was deleted); add it instead")
        check_lesson(text)
        lineage = self.rows.lineage(exp_id)
        new = Experience(text, old.domain if domain is None else domain, old.confidence,
                         Provenance(old.provenance.node_id, old.provenance.model, int(time.time() * 1000),
                                    old.provenance.iteration), old.scope)
        if new.id == exp_id:
            return old
        self.own([new], encode([new.text]))
        self.rows.set_lineage(new.id, lineage)
        history.record(self.rows.db, old, new.id)
        tags_table.tag(self.rows.db, new.id, tags_table.checked(tuple(tags_table.of(self.rows.db, exp_id))))  # its scopes
        self.removed(self.rows.tombstone([exp_id], ANY_SIGNER)[1])
        return new

    def own(self, experiences: list[Experience], vectors: np.ndarray) -> list[str]:
        """`dsonet.library.Library.add_vectors`."""
        vectors = np.asarray(vectors, np.float32)
        if vectors.shape != (len(experiences), self.profile.dim):
            raise LibraryError(f"vectors: shape {vectors.shape}, expected ({len(experiences)}, {self.profile.dim})")
        try:
            check_unit(vectors)
        except BatchError as exc:
            raise LibraryError(f"{exc}; nothing was stored") from None
        if not experiences:
            return []
        codes = compressed(self.profile, vectors)
        return self._write(experiences, None, codes.signs, codes.scales, codes.baseline, vectors, received=False).added

    def received(self, batch: CompressedBatch, keep: np.ndarray | None,
                 encode: Callable[[list[str]], np.ndarray] | None, vectors: list[np.ndarray | None] | None,
                 within: Callable[[], None] | None, decoded: np.ndarray | None) -> IngestResult:
        """`dsonet.library.Library.ingest`; ``encode``: the texts' floats, where they are to be held."""
        rows = self.admitted(batch, keep)
        exps = [batch.experiences[i] for i in rows]
        if encode is not None and vectors is None:
            wanted = self.floats_wanted(batch, keep)
            vectors = [None] * len(exps)
            if wanted:
                for i, v in zip(wanted, encode([exps[i].text for i in wanted])):
                    vectors[i] = v
        if vectors is not None and len(vectors) != len(exps):
            raise LibraryError(f"vectors: {len(vectors)} for {len(exps)} admitted rows; give one (or None) per row")
        if decoded is not None and np.shape(decoded) != (len(exps), self.profile.dim):
            raise LibraryError(f"decoded: shape {np.shape(decoded)}, expected ({len(exps)}, {self.profile.dim}): "
                               "the round's ê of the admitted rows only")
        result = self._write(exps, batch.node_id, batch.codes.signs[rows], batch.codes.scales[rows],
                             batch.codes.baseline, vectors if exps else None, received=True,
                             within=within, decoded=decoded)
        return IngestResult(result.added, result.duplicates, result.rejected + len(batch) - len(rows), result.evicted)

    def admitted(self, batch: CompressedBatch, keep: np.ndarray | None) -> np.ndarray:
        """The rows of a batch ``keep`` admits, once the batch is known to fit this library."""
        if batch.profile != self.profile:
            raise LibraryError(f"batch.profile: {batch.profile.to_dict()} is not this library's {self.profile.to_dict()}")
        if keep is not None and len(keep) != len(batch):
            raise LibraryError(f"keep: {len(keep)} entries for a batch of {len(batch)}; give one boolean per row")
        return np.arange(len(batch)) if keep is None else np.flatnonzero(np.asarray(keep, bool))

    def floats_wanted(self, batch: CompressedBatch, keep: np.ndarray | None) -> list[int]:
        """`dsonet.library.Library.floats_wanted`."""
        exps = [batch.experiences[i] for i in self.admitted(batch, keep)]
        signer = batch.node_id
        blocked = self.rows.blocked((e.id, signer) for e in exps)
        idx = self.index
        held = {(e.id, signer) for e in exps for r in idx.rows_of(e.id) if idx.signers[r] == signer and idx.held[r]}
        return [i for i, e in enumerate(exps) if (e.id, signer) not in blocked and (e.id, signer) not in held]

    def removed(self, seqs: list[int]) -> None:
        """Rows gone from the file (tombstoned, quarantined): no longer served."""
        self.view_changed(self.index.refresh([], seqs))

    def _write(self, exps, signer, signs, scales, baseline, vectors, received: bool,
               within: Callable[[], None] | None = None, decoded: np.ndarray | None = None) -> IngestResult:
        written = self.rows.write(exps, signer, signs, scales, baseline, vectors, received, within)
        self.view_changed(self.index.refresh(written.rows, written.removed))
        if decoded is not None and written.rows:  # each written row's code is the one its ê was decoded from
            at = {e.id: i for i, e in enumerate(exps)}
            self.decoded.keep([self.index.row(w.seq) for w in written.rows],
                              np.asarray(decoded, np.float32)[[at[w.id] for w in written.rows]])
        return written.result
