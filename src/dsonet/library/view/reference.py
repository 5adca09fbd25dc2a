"""The trusted rows a round of received batches is judged beside (a lone batch is not judged by
itself alone), chosen so that no one key can move them.

A copier that got ~100 rows into the pool used to decide alone what an honest newcomer's lone
batches on another topic were measured against, and they were refused. This node's own rows go
in as they are (its own judgement); each peer signer holds at most ``share`` of the pool, so at
least 1/share keys fill it, and the round records who they were (`Reference.signers`): a refusal
costs the refused key reputation only when enough of them agree (`DeltaSoupConfig.filter_agreement`).
"""

from __future__ import annotations

from math import ceil
from typing import Callable, Sequence

import numpy as np

from dsonet.codec.reference import Reference
from dsonet.library.index.row_index import RowIndex

# Each peer signer's most of the pool: four keys needed to fill it. A quarter keeps one trusted
# peer's rows enough to judge a lone far batch on a node that has written nothing itself (64 of
# the node's 256 reference rows), and no single key the pool's majority once others are there.
SIGNER_SHARE = 0.25


def capped_per_signer(rows: Sequence[int], signer_of: Sequence[str], room: int, limit: int,
                      share: float = SIGNER_SHARE) -> list[int]:
    """The first ``room`` of ``rows`` (in their order, newest first as the caller gives them) with at
    most ⌈share · limit⌉ rows of any one signer."""
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share: {share!r} must lie in (0, 1]; {SIGNER_SHARE} keeps four keys in the pool")
    per_signer, taken, out = ceil(share * limit), {}, []
    for r in rows:
        if len(out) >= room:
            break
        s = signer_of[r]
        if taken.get(s, 0) < per_signer:
            taken[s] = taken.get(s, 0) + 1
            out.append(r)
    return out


class ReferencePool:
    """The rows a round is judged beside, picked from a library's index; each row's vector is
    decoded (or read from the file) once while it stays in the pool, not every round: an index row
    never changes (a changed row is appended again)."""

    def __init__(self, index: RowIndex, decoded: Callable[[np.ndarray], np.ndarray]):
        """``decoded``: ê of index rows (`dsonet.library.view.decoded`: as the round that stored them decoded them)."""
        self.index, self.decoded = index, decoded
        self._vectors: dict[int, np.ndarray] = {}  # index row -> vector, of the last pool only (≤ limit rows)

    def pick(self, limit: int, trusted: Callable[[str], bool] | None = None) -> Reference | None:
        """Up to ``limit`` rows: this node's own (the newest), then, where it holds fewer and
        ``trusted`` is given, the newest rows of the signers it admits (their ê), each signer a
        `SIGNER_SHARE` of ``limit`` at most. None when there are none."""
        idx = self.index
        rows = idx.own_rows()[-limit:]
        if len(rows) < limit and trusted is not None:
            live = sorted(idx.live_rows().tolist(), reverse=True)
            admitted = {s: trusted(s) for s in {idx.signers[r] for r in live}}
            peers = [r for r in live if not idx.own[r] and admitted[idx.signers[r]]]
            picked = capped_per_signer(peers, idx.signers, limit - len(rows), limit)
            rows = np.concatenate([rows, np.array(picked, np.int64)])
        if not len(rows):
            return None
        return Reference(self._vectors_of(rows), tuple(idx.signers[r] for r in rows.tolist()), idx.index.scales[rows])

    def _vectors_of(self, rows: np.ndarray) -> np.ndarray:
        had = self._vectors
        new = np.array([r for r in rows.tolist() if r not in had], np.int64)
        if len(new):  # a row's float where held, else its ê as the round that stored it decoded it, if kept
            held = np.array([self.index.held[r] for r in new.tolist()], bool)
            found = np.empty((len(new), self.index.profile.dim), np.float32)
            found[held], found[~held] = self.index.vectors(new[held]), self.decoded(new[~held])
            had = {**had, **dict(zip(new.tolist(), found))}
        self._vectors = {r: had[r] for r in rows.tolist()}
        return np.stack(list(self._vectors.values()))
