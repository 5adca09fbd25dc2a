"""ê of rows just stored, as the round that admitted them decoded them: decoded once.

A node's round decodes every received row (DeltaSoup's phase 2, `dsonet.aggregate.phases`); the
merged view then clusters the new rows by the same ê, and the next round's reference pool takes
the newest trusted rows. Both used to reconstruct them from the index's codes again, the same
arithmetic bit for bit (2.1 s of a 10,000-row round's 7.6 s of storing and merging at d = 7680,
load 7 on 2 cores). The library keeps the round's copy, bounded in bytes, until the merge has
read it; then only the newest rows stay, for the reference pool (`RECENT`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

# A 10,000-row round at d = 7680 (293 MiB) fits; past this, rows are reconstructed as before.
MAX_BYTES = 320 * 2**20
RECENT = 512  # rows kept once merged: the next reference pool takes the newest (256 rows at most)


class DecodedRows:
    """Index row -> its ê, with ``reconstruct`` (the index's decoder) for every row not held.
    `keep` and `merged` run under the owner's lock (a node's), calls may come without it."""

    def __init__(self, reconstruct: Callable[[np.ndarray], np.ndarray], dim: int, max_bytes: int = MAX_BYTES):
        self._reconstruct, self.dim, self.max_bytes = reconstruct, dim, max_bytes
        self._rows: dict[int, np.ndarray] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._rows)

    def keep(self, rows: list[int], vectors: np.ndarray) -> None:
        """Hold the ê of these index rows, (len(rows), d), as far as ``max_bytes`` allows."""
        if not rows:
            return
        room = max(0, (self.max_bytes - self._bytes) // vectors[0].nbytes)
        for r, v in zip(rows[:room], vectors[:room]):
            self._bytes += v.nbytes * (r not in self._rows)
            self._rows[r] = v

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        """ê of these index rows, (len(rows), d): held ones as kept, the others reconstructed."""
        rows = np.asarray(rows, np.int64)
        if len(rows) == 0:
            return np.zeros((0, self.dim), np.float32)
        if not self._rows:
            return self._reconstruct(rows)
        # read without the owner's lock (a merge builds without it): one lookup a row, no iteration
        found = [self._rows.get(r) for r in rows.tolist()]
        hit = np.fromiter((v is not None for v in found), bool, len(rows))
        if not hit.any():
            return self._reconstruct(rows)
        kept = np.stack([v for v in found if v is not None])
        if hit.all():
            return kept
        out = np.empty((len(rows), self.dim), np.float32)
        out[hit] = kept
        out[~hit] = self._reconstruct(rows[~hit])
        return out

    def merged(self, rows: np.ndarray, live: np.ndarray) -> None:
        """The merge read these rows: forget them, and rows no longer live, but the newest `RECENT`."""
        done = set(np.asarray(rows, np.int64).tolist())
        newest = set(sorted(self._rows)[-RECENT:])
        for r in [r for r in self._rows if not live[r] or (r in done and r not in newest)]:
            self._bytes -= self._rows.pop(r).nbytes
