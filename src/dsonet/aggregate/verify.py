"""Phase 1, verify: everything checked about a batch before it may join a round.

`verify_payload` is stateless: size, hash, Ed25519 signature (via `dsonet.codec.decode`),
batch size and freshness. `Gate` adds what needs memory: replays (a batch hash is accepted
once), the per-node rate limit, the budgets of keys not yet trusted (batches and rows per key,
rows and distinct keys for all of them together) and the reputation floor. Nothing here stores
a rejected batch.

A batch the gate admits is *pending* until its receiver says it was stored (`settle`) or not
(`release`): only a stored batch counts as seen, so a round that fails to store (a full disk, a
locked database) leaves its batches free to be delivered again, not refused as replays. The
seen hashes live in memory; a receiver that stores batches durably records their hashes with
them and hands them back through `Gate.remember` when it starts again (a node's round does:
`dsonet.network.ingest`, the hashes kept in `dsonet.network.ledger`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from dsonet.aggregate.config import DeltaSoupConfig
from dsonet.aggregate.errors import AggregationError, RateLimited
from dsonet.aggregate.reputation import Reputation
from dsonet.codec import CompressedBatch, Profile, decode


def verify_payload(payload: bytes, now_ms: int, config: DeltaSoupConfig, profiles: list[Profile]) -> CompressedBatch:
    """Decode and verify one payload in one of ``profiles``; raises `BatchError` (format, profile,
    signature) or `AggregationError` (too many experiences, stale or future timestamp)."""
    if not profiles:
        raise AggregationError("profile", "no profile to read batches in; give the node's profile")
    batch = decode(payload, profiles, max_bytes=config.max_batch_bytes)
    if len(batch) > config.max_batch_experiences:
        raise AggregationError(
            "experiences",
            f"{len(batch)} experiences; this node accepts at most {config.max_batch_experiences} per batch",
        )
    skew = batch.timestamp_ms - now_ms
    if abs(skew) > config.t_max_ms:
        raise AggregationError(
            "timestamp", f"{batch.timestamp_ms} is {skew / 1000:+.0f} s from now; batches must be within "
            f"±{config.t_max_ms / 1000:.0f} s (check the sender's clock, or resend a fresh batch)"
        )
    return batch


@dataclass(frozen=True)
class _Pending:
    """A batch admitted and not yet settled."""

    node_id: str
    at: int  # when it was admitted (ms)
    rows: int
    newcomer: bool  # its key was not yet trusted: its rows count against the newcomers' budgets
    shared: int = 0  # ... and these of them (past the key's free rows) against the budget all newcomers share


class _RowLog:
    """Rows counted over a sliding window: (time, rows) entries and their running total."""

    def __init__(self) -> None:
        self.entries: deque[tuple[int, int]] = deque()
        self.total = 0

    def add(self, at: int, rows: int) -> None:
        self.entries.append((at, rows))
        self.total += rows

    def since(self, horizon: int) -> int:
        """The rows counted after ``horizon`` (older entries are forgotten)."""
        while self.entries and self.entries[0][0] <= horizon:
            self.total -= self.entries.popleft()[1]
        return self.total


class Gate:
    """The stateful checks: replay, rate limit, newcomers' budgets, reputation."""

    def __init__(self, config: DeltaSoupConfig, reputation: Reputation):
        self.config, self.reputation = config, reputation
        self._seen: dict[str, int] = {}  # batch hash -> its timestamp (pruned once stale anyway)
        self._pending: dict[str, _Pending] = {}  # admitted, not yet settled, by batch hash
        self._recent: dict[str, deque[int]] = {}  # node id -> accepted submission times
        self._newcomers: dict[str, int] = {}  # untrusted node id -> when it was last admitted
        self._key_rows: dict[str, _RowLog] = {}  # untrusted node id -> its rows settled in the window
        self._shared_rows = _RowLog()  # rows settled from untrusted keys past each key's free rows
        self._pending_rows: dict[str, int] = {}  # untrusted node id -> its rows admitted, not yet settled
        self._pending_shared = 0  # the shared rows of those

    def admit(self, batch: CompressedBatch, now_ms: int) -> None:
        """Raise `AggregationError` if the batch is a replay, its node is over its rate or
        under the reputation floor; otherwise hold it as pending."""
        if batch.hash in self._seen or batch.hash in self._pending:
            raise AggregationError("hash", f"batch {batch.hash[:12]}… was already received; replays are dropped")
        if self.reputation.skipped(batch.node_id):
            helped, harmed = self.reputation.outcomes(batch.node_id)
            raise AggregationError(
                "node_id", f"{batch.node_id[:12]}… has reputation {self.reputation.get(batch.node_id):.3f} "
                f"(floor {self.reputation.floor}) and {harmed} harmful / {helped} helpful outcomes; "
                "it is under the floor or convicted by its outcomes, so its batches are skipped"
            )
        window = self.config.rate_window_ms
        trusted = self.reputation.get(batch.node_id) >= self.config.trusted
        if not trusted:  # a bounded number of keys not yet trusted may speak in a window (Sybil floods)
            self._newcomers = {n: t for n, t in self._newcomers.items() if t > now_ms - window}
            if batch.node_id not in self._newcomers and len(self._newcomers) >= self.config.new_keys_per_window:
                raise AggregationError("node_id", f"{len(self._newcomers)} keys not yet trusted have sent batches in "
                                       f"the last {window / 60_000:.0f} min, the most this node takes; try later")
        limit = self.config.rate_limit if trusted else min(self.config.rate_limit, self.config.new_key_rate_limit)
        times = self._recent.setdefault(batch.node_id, deque())
        while times and times[0] <= now_ms - window:
            times.popleft()
        if len(times) + sum(p.node_id == batch.node_id for p in self._pending.values()) >= limit:
            raise RateLimited(batch.node_id, f"{batch.node_id[:12]}… sent {len(times)} batches in the last "
                              f"{window / 60_000:.0f} min; the limit is {limit}" + ("" if trusted else
                              f" until its reputation reaches {self.config.trusted}"))
        shared = 0
        if not trusted:
            shared = self._check_new_rows(batch, now_ms)
            self._newcomers[batch.node_id] = now_ms
            self._pending_rows[batch.node_id] = self._pending_rows.get(batch.node_id, 0) + len(batch)
            self._pending_shared += shared
        self._pending[batch.hash] = _Pending(batch.node_id, now_ms, len(batch), not trusted, shared)

    def _check_new_rows(self, batch: CompressedBatch, now_ms: int) -> int:
        """Raise `RateLimited` if a batch from a key not yet trusted would take that key over its rows
        in the window, or the rows past each key's free rows over the budget all such keys share
        (settled and pending rows both count); otherwise return how many of its rows draw on that
        budget. A newcomer within its free rows is never refused for what other keys sent."""
        c, minutes = self.config, self.config.rate_window_ms / 60_000
        horizon = now_ms - c.rate_window_ms
        mine = self._key_rows.get(batch.node_id)
        key_rows = (mine.since(horizon) if mine else 0) + self._pending_rows.get(batch.node_id, 0)
        if c.new_key_row_limit is not None and len(batch) > c.new_key_row_limit:  # no later window would take it
            raise AggregationError("rows", f"this batch holds {len(batch)} rows; a key under reputation {c.trusted} "
                                   f"may send {c.new_key_row_limit} in {minutes:.0f} min: send smaller batches")
        if c.new_key_row_limit is not None and key_rows + len(batch) > c.new_key_row_limit:
            raise RateLimited(batch.node_id, f"{batch.node_id[:12]}… sent {key_rows} rows in the last {minutes:.0f} "
                              f"min; a key under reputation {c.trusted} may send {c.new_key_row_limit}, and this "
                              f"batch holds {len(batch)}", "rows")
        shared = max(0, key_rows + len(batch) - c.new_key_free_rows) - max(0, key_rows - c.new_key_free_rows)
        used = self._shared_rows.since(horizon) + self._pending_shared
        if c.new_keys_row_limit is not None and shared and used + shared > c.new_keys_row_limit:
            raise RateLimited(batch.node_id, f"keys under reputation {c.trusted} sent {used} rows past their first "
                              f"{c.new_key_free_rows} each in the last {minutes:.0f} min, and this node takes "
                              f"{c.new_keys_row_limit} such rows; this batch holds {shared} more", "rows")
        return shared

    def settle(self, batches: list[CompressedBatch]) -> None:
        """These pending batches were handled for good (stored, or refused for their content)."""
        for batch in batches:
            p = self._unpend(batch) or _Pending(batch.node_id, batch.timestamp_ms, len(batch), False)
            self._recent.setdefault(p.node_id, deque()).append(p.at)
            if p.newcomer:
                self._key_rows.setdefault(p.node_id, _RowLog()).add(p.at, p.rows)
                self._shared_rows.add(p.at, p.shared)
            self._seen[batch.hash] = batch.timestamp_ms
            self._prune(p.at)

    def remember(self, seen: dict[str, int]) -> None:
        """Batches stored before this gate existed (hash -> batch timestamp ms, e.g. read back from the
        library they were stored in): refused as replays, like the batches settled here."""
        self._seen.update(seen)

    def release(self, batches: list[CompressedBatch]) -> None:
        """These pending batches were not stored: forget them, so a redelivery is admitted."""
        for batch in batches:
            self._unpend(batch)

    def _unpend(self, batch: CompressedBatch) -> _Pending | None:
        p = self._pending.pop(batch.hash, None)
        if p is not None and p.newcomer:
            self._pending_shared -= p.shared
            left = self._pending_rows.pop(p.node_id) - p.rows
            if left:
                self._pending_rows[p.node_id] = left
        return p

    def _prune(self, now_ms: int) -> None:
        # a hash older than the freshness window can never be accepted again, so forget it
        if len(self._seen) > 4096:
            horizon = now_ms - 2 * self.config.t_max_ms
            self._seen = {h: t for h, t in self._seen.items() if t >= horizon}
        if len(self._key_rows) > 4096:  # keys whose rows have all left the window (a Sybil flood's)
            horizon = now_ms - self.config.rate_window_ms
            self._key_rows = {k: log for k, log in self._key_rows.items() if log.since(horizon)}
