"""Search over the library's rows: the in-memory code index kept in step with the file, and
the last stage, exact rescoring from the floats the file holds.

Stages 1–3 (coarse sketch, asymmetric estimate over the codes, optional support refinement)
are `dsonet.library.index.code_index.CodeIndex`; this module adds stage 4: the best `RESCORE`
candidates whose float vector this node holds (its own experiences, or peers' with
``encode_texts``) are rescored exactly, reading those floats from the file (30 KB each at
d = 7680, so they are not kept in memory).
"""

from __future__ import annotations

import sqlite3

import numpy as np

from dsonet.codec.batch import Profile
from dsonet.library.index.eigen import matvec
from dsonet.library.index.code_index import CodeIndex, Fitted, Refit
from dsonet.library.store import quarantine
from dsonet.library.store.records import IndexRow, row_code
from dsonet.library.store.rows import RowStore
from dsonet.library.index.saved_fit import fit_on_open, keep_fits

OVERSAMPLE = 2048  # coarse candidates per query rescored by the asymmetric estimate (about 2 ms)
RESCORE = 64  # best candidates rescored exactly where this node holds the float vector


class RowIndex:
    """Index row r is file row ``seqs[r]``; a changed row is appended again and its old row masked."""

    def __init__(self, store: RowStore, profile: Profile, support: np.ndarray | None = None, defer_refit: bool = False):
        """``defer_refit``: once the file's rows are loaded (and fitted), writes leave the index's
        refits to the owner (see `CodeIndex`)."""
        self.store, self.profile = store, profile
        # fitted once the file's rows are loaded: from the fit the file keeps where its rows are unchanged
        self.index = CodeIndex(profile.dim, profile.group_size, profile.rotation_seed, support=support, defer_refit=True)
        self._baseline_rows: dict[int, int] = {}  # file baseline id -> index baseline row
        for bid, vector in store.baselines():
            self._baseline_rows[bid] = self.index.add_baseline(vector)
        self.seqs: list[int] = []
        self.ids: list[str] = []
        self.signers: list[str] = []
        self.domains: list[str] = []
        self.held = bytearray()  # per index row: 1 where the file holds this node's float vector
        self.own = bytearray()  # per index row: 1 for this node's own experiences
        self.confidence: list[float] = []  # per index row (the merge weighs members without a file read)
        self._row_of: dict[int, int] = {}  # seq -> live index row
        self._rows_of_id: dict[str, set[int]] = {}  # experience id -> its live index rows (one per signer)
        self._dom_cache_n = -1  # len(self.domains) when the domain-code array was last built
        for chunk in store.index_rows():
            self._append(chunk)
        self.fits = fit_on_open(self.index, store.db)  # stage -> "restored" | "fitted"
        self.index.defer_refit = defer_refit

    def __len__(self) -> int:
        return len(self._rows_of_id)

    def _append(self, rows: list[IndexRow]) -> None:
        signs, scales, bids = row_code(rows, self.profile.group_size, self.profile.dim)
        for bid in set(bids) - self._baseline_rows.keys():
            self._baseline_rows[bid] = self.index.add_baseline(self.store.baseline(bid))
        idx = self.index.add(signs, scales, np.array([self._baseline_rows[b] for b in bids], np.int32))
        self.held.extend(bytes(r.held for r in rows))
        self.own.extend(bytes(r.own for r in rows))
        self.confidence.extend(float(r.confidence) for r in rows)
        for r, i in zip(rows, idx.tolist()):
            self.seqs.append(r.seq)
            self.ids.append(r.id)
            self.signers.append(r.signer)
            self.domains.append(r.domain)
            self._row_of[r.seq] = i
            self._rows_of_id.setdefault(r.id, set()).add(i)

    def refresh(self, written: list[IndexRow], removed: list[int]) -> set[str]:
        """Follow a committed write: the rows it wrote (as `RowStore.write` hands them back, not read
        from the file again) (re)indexed, removed seqs masked. Returns the domains whose rows changed."""
        gone = [self._row_of.pop(s) for s in [*(r.seq for r in written), *removed] if s in self._row_of]
        self.index.remove(np.array(gone, np.int64))
        for r in gone:
            rows = self._rows_of_id[self.ids[r]]
            rows.discard(r)
            if not rows:
                del self._rows_of_id[self.ids[r]]
        domains = {self.domains[r] for r in gone}
        if written:
            self._append(written)
            domains.update(r.domain for r in written)
        return domains

    def row(self, seq: int) -> int | None:
        return self._row_of.get(seq)

    def rows_of(self, exp_id: str) -> list[int]:
        """The live index rows of an experience, one per signer, in index order."""
        return sorted(self._rows_of_id.get(exp_id, ()))

    def own_rows(self) -> np.ndarray:
        """Live index rows of this node's own experiences, oldest first."""
        own = np.frombuffer(bytes(self.own), np.uint8).astype(bool) & self.index.live[: len(self.own)]
        return np.flatnonzero(own)

    def live_rows(self) -> np.ndarray:
        return np.fromiter(self._row_of.values(), np.int64, len(self._row_of))

    def domain_rows(self, domain: str) -> np.ndarray:
        return np.flatnonzero(self.index.live[: self.index.n] & self.domain_mask(domain))

    def domain_mask(self, domain: str) -> np.ndarray:
        """Boolean mask over index rows of one domain (domain codes cached as an int array)."""
        if self._dom_cache_n != len(self.domains):
            names, codes = np.unique(np.array(self.domains, dtype=object).astype(str), return_inverse=True)
            self._dom_names, self._dom_codes, self._dom_cache_n = list(names), codes, len(self.domains)
        if domain not in self._dom_names:
            return np.zeros(len(self.domains), bool)
        return self._dom_codes == self._dom_names.index(domain)

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows), d): the float vector where the file holds it, else the reconstruction ê."""
        rows = np.asarray(rows, np.int64)
        out = self.index.reconstruct(rows) if len(rows) else np.zeros((0, self.profile.dim), np.float32)
        held, floats = self._held_floats(rows)
        out[held] = floats
        return out

    def _held_floats(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        held = np.array([self.held[r] for r in rows.tolist()], bool)
        found = self.store.floats([self.seqs[r] for r in rows[held].tolist()])
        floats = np.stack([found[self.seqs[r]] for r in rows[held].tolist()]) if held.any() else \
            np.zeros((0, self.profile.dim), np.float32)
        return held, floats

    def rank(self, q: np.ndarray, k: int, domain: str | None = None,
             ids: set[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Index rows and scores for a unit query, best first, before merging: the codes' estimate,
        then the exact cosine for the best `RESCORE` candidates whose float vector the file holds.
        ``ids``: only rows of these experiences (a search scoped by tags)."""
        allowed = None if domain is None else self.domain_mask(domain)
        if ids is not None:
            within = np.fromiter((i in ids for i in self.ids), bool, len(self.ids))
            allowed = within if allowed is None else allowed & within
        rows, scores = self.index.search(q, k, max(OVERSAMPLE, 4 * k), allowed)
        held, floats = self._held_floats(rows[:RESCORE])
        if held.any():
            scores = scores.copy()
            scores[np.flatnonzero(held)] = matvec(floats, q)
            order = np.argsort(-scores, kind="stable")
            rows, scores = rows[order], scores[order]
        return rows, scores

    def memory_bytes(self) -> int:
        return self.index.memory_bytes() + len(self.held) + len(self.own)

    # the refit in steps, for an owner that writes while it searches (`Library.refit_due`)

    def refit_due(self) -> Refit | None:
        """The stages (coarse sketch, subspace) the rows have outgrown, or None."""
        return self.index.refit_due()

    def fit(self, due: Refit) -> Fitted:
        """Fit them again on the rows present when they fell due; searches meanwhile use the previous fit."""
        return self.index.fit(due)

    def install_fit(self, due: Refit, fitted: Fitted) -> None:
        """Show the new fit (the sketch catching up on rows added since) and keep it for the next open."""
        self.index.install(fitted)
        keep_fits(self.store.db, self.index, {name for name in ("subspace", "sketch") if getattr(due, name)})


def open_index(store: RowStore, profile: Profile, support: np.ndarray | None, defer_refit: bool) -> RowIndex:
    """The index over every row's code: where a code is damaged, its row is quarantined first (a full
    sweep costs ~0.1 s at 10k rows, so a healthy open does not pay for it; a node sweeps once at start,
    `Library.heal`, for damage in what the index does not read)."""
    try:
        return RowIndex(store, profile, support, defer_refit=defer_refit)
    except (sqlite3.OperationalError, ValueError) as exc:
        if not quarantine.row_damage(exc) or not quarantine.sweep(store.db, profile):
            raise
    return RowIndex(store, profile, support, defer_refit=defer_refit)
