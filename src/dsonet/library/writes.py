"""The library's write path: rows into the file (`RowStore.write`: one transaction), then the index
following what the write handed back (it does not read the rows again) and the merged view told which
domains changed; a received batch (`Admitted`) with its ê kept for the merge where its round decoded
them, and our encodings of its texts as their floats where given."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import numpy as np

from dsonet.codec import CompressedBatch, Profile
from dsonet.codec.batch import check_unit
from dsonet.errors import BatchError
from dsonet.experience import Experience, check_lesson
from dsonet.library.admitted import Admitted
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
        # the episodes that taught the lesson still stand behind its new wording: its evidence goes with it
        new = Experience(text, old.domain if domain is None else domain, old.confidence,
                         replace(old.provenance, timestamp_ms=int(time.time() * 1000)), old.scope)
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

    def received(self, admitted: Admitted, encode: Callable[[list[str]], np.ndarray] | None,
                 within: Callable[[], None] | None) -> IngestResult:
        """`dsonet.library.Library.ingest`; ``encode``: the texts' floats are to be held, encoded by it
        where ``admitted`` brings no encodings."""
        batch = admitted.batch
        rows = self.admitted(batch, admitted.keep)
        exps = [batch.experiences[i] for i in rows]
        expected = (len(exps), self.profile.dim)
        if admitted.decoded is not None and np.shape(admitted.decoded) != expected:
            raise LibraryError(f"decoded: shape {np.shape(admitted.decoded)}, expected {expected}: the round's ê "
                               "of the admitted rows only")
        if admitted.encodings is not None and np.shape(admitted.encodings) != expected:
            raise LibraryError(f"encodings: shape {np.shape(admitted.encodings)}, expected {expected}: our encodings "
                               "of the admitted rows' texts only")
        vectors = None
        if exps and (admitted.encodings is not None or encode is not None):
            wanted = self._floats_wanted(batch.node_id, exps)
            vectors = [None] * len(exps)
            if wanted:
                given = admitted.encodings
                ours = encode([exps[i].text for i in wanted]) if given is None else given[wanted]
                for i, v in zip(wanted, ours):
                    vectors[i] = v
        result = self._write(exps, batch.node_id, batch.codes.signs[rows], batch.codes.scales[rows],
                             batch.codes.baseline, vectors, received=True, within=within, decoded=admitted.decoded)
        return IngestResult(result.added, result.duplicates, result.rejected + len(batch) - len(rows), result.evicted)

    def admitted(self, batch: CompressedBatch, keep: np.ndarray | None) -> np.ndarray:
        """The rows of a batch ``keep`` admits, once the batch is known to fit this library."""
        if batch.profile != self.profile:
            raise LibraryError(f"batch.profile: {batch.profile.to_dict()} is not this library's {self.profile.to_dict()}")
        if keep is not None and len(keep) != len(batch):
            raise LibraryError(f"keep: {len(keep)} entries for a batch of {len(batch)}; give one boolean per row")
        return np.arange(len(batch)) if keep is None else np.flatnonzero(np.asarray(keep, bool))

    def _floats_wanted(self, signer: str, exps: list[Experience]) -> list[int]:
        """Which of a signer's rows (positions in ``exps``) want our float: not where the row's is held
        already (a stream replay), nor where the row is tombstoned or evicted."""
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
