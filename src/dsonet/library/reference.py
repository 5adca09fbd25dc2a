"""The trusted rows a round of received batches is judged beside (a lone batch is not judged by
itself alone, issue 14), chosen so that no one key can move them (issue 24, finding 3).

A copier that got ~100 rows into the pool used to decide alone what an honest newcomer's lone
batches on another topic were measured against, and they were refused. This node's own rows go
in as they are (its own judgement); each peer signer holds at most ``share`` of the pool, so at
least 1/share keys fill it, and the round records who they were (`Reference.signers`): a refusal
costs the refused key reputation only when enough of them agree (`DeltaSoupConfig.filter_agreement`).
"""

from __future__ import annotations

from math import ceil
from typing import NamedTuple, Sequence

import numpy as np

# Each peer signer's most of the pool: four keys needed to fill it. A quarter keeps one trusted
# peer's rows enough to judge a lone far batch on a node that has written nothing itself (64 of
# the node's 256 reference rows), and no single key the pool's majority once others are there.
SIGNER_SHARE = 0.25


class Reference(NamedTuple):
    vectors: np.ndarray  # (m, d) the rows' vectors
    signers: tuple[str, ...]  # (m,) each row's signer
    scales: np.ndarray | None = None  # (m, d / g) each row's code scales α as stored; None: compress to see them


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
