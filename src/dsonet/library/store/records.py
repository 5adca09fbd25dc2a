"""What a stored row is read as, by each reader: the index (`IndexRow`), `dso show` (`Copy`), a write's
caller (`IngestResult`, `Written`), and an experience or a code again (`row_experience`, `row_code`,
`stored_codes`). The rows themselves, and the rules that decide them: `dsonet.library.store.rows`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from dsonet.codec.bitdelta import BitDeltaCodes, compress
from dsonet.codec.profile import Profile
from dsonet.experience import Experience, Provenance
from dsonet.library.store.file import StoredRow
from dsonet.scope import Scope


class IndexRow(NamedTuple):
    """What the in-memory index holds of a row (`dsonet.library.index.row_index`)."""

    seq: int
    id: str
    signer: str
    domain: str
    signs: bytes
    scales: bytes
    baseline_id: int
    held: int  # 1 where the file holds this node's float vector
    own: int  # 1 for this node's own experience
    confidence: float


# each field's SQL, where it is not the column of its name
INDEX_COLUMNS = ", ".join({"held": "vector IS NOT NULL", "own": "received = 0"}.get(f, f) for f in IndexRow._fields)


class Copy(NamedTuple):
    """One signer's stored row of an experience, as `dso show` lists it."""

    code_digest: str
    sign_bytes: int
    scale_bytes: int
    baseline_id: int
    float_held: bool
    received: bool
    published: bool
    uses: int
    helped: int
    signer: str
    episodes: int  # the evidence this signer's row carries (`Provenance`)
    agents: int


@dataclass(frozen=True)
class IngestResult:
    added: list[str] = field(default_factory=list)
    duplicates: int = 0  # already held (idempotent re-delivery)
    rejected: int = 0  # tombstoned, evicted, or left out by `keep`
    evicted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Written:
    """What one write changed, for the in-memory parts to follow: the rows to (re)index in seq
    order (what was just written: the index need not read it back), and the seqs gone."""

    result: IngestResult
    rows: list[IndexRow]
    removed: list[int]


def row_experience(row: StoredRow) -> Experience:
    """An experience from a full row; its provenance's node id is the row's signer."""
    prov = Provenance(row.signer, row.model, row.timestamp_ms, row.iteration, row.episodes, row.agents)
    return Experience(row.text, row.domain, row.confidence, prov, Scope.parse(row.scope))


def row_code(rows: list[StoredRow] | list[IndexRow], group_size: int,
             dim: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(signs (m, G, W), scales (m, G), baseline ids) of rows."""
    n_words = -(-group_size // 32)
    g = dim // group_size
    signs = np.frombuffer(b"".join(r.signs for r in rows), "<u4").reshape(len(rows), g, n_words)
    scales = np.frombuffer(b"".join(r.scales for r in rows), "<f4").reshape(len(rows), g)
    return signs, scales, [r.baseline_id for r in rows]


def stored_codes(rows: list[StoredRow], profile: Profile, baseline_id: int | None) -> BitDeltaCodes:
    """The codes stored for a node's own rows, coded again from their floats only where a file from
    protocol v1 coded them against another baseline than the profile's (``baseline_id``: its row)."""
    signs, scales, bids = row_code(rows, profile.group_size, profile.dim)
    if set(bids) == {baseline_id}:
        return BitDeltaCodes(signs, scales, profile.baseline, profile.group_size, profile.rotation_seed)
    return compressed(profile, np.stack([np.frombuffer(r.vector, "<f4") for r in rows]))


def compressed(profile: Profile, vectors: np.ndarray) -> BitDeltaCodes:
    """Vectors in ``profile``'s space coded as the library stores them: against its baseline and rotation."""
    return compress(vectors, profile.group_size, baseline=profile.baseline, rotation_seed=profile.rotation_seed)
