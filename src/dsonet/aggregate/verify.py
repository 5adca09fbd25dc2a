"""Phase 1, verify: everything checked about a batch before it may join a round.

`verify_payload` is stateless: size, hash, Ed25519 signature (via `dsonet.codec.decode`),
batch size and freshness. `Gate` adds what needs memory: replays (a batch hash is accepted
once), the per-node rate limit and the reputation floor. Nothing here stores a rejected batch.

A batch the gate admits is *pending* until its receiver says it was stored (`settle`) or not
(`release`): only a stored batch counts as seen, so a round that fails to store (a full disk, a
locked database) leaves its batches free to be delivered again, not refused as replays.
"""

from __future__ import annotations

from collections import deque

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


class Gate:
    """The stateful checks: replay, rate limit, reputation."""

    def __init__(self, config: DeltaSoupConfig, reputation: Reputation):
        self.config, self.reputation = config, reputation
        self._seen: dict[str, int] = {}  # batch hash -> its timestamp (pruned once stale anyway)
        self._pending: dict[str, tuple[str, int]] = {}  # admitted, not yet settled: hash -> (node id, now)
        self._recent: dict[str, deque[int]] = {}  # node id -> accepted submission times
        self._newcomers: dict[str, int] = {}  # untrusted node id -> when it was last admitted

    def admit(self, batch: CompressedBatch, now_ms: int) -> None:
        """Raise `AggregationError` if the batch is a replay, its node is over its rate or
        under the reputation floor; otherwise hold it as pending."""
        if batch.hash in self._seen or batch.hash in self._pending:
            raise AggregationError("hash", f"batch {batch.hash[:12]}… was already received; replays are dropped")
        if self.reputation.skipped(batch.node_id):
            raise AggregationError(
                "node_id", f"{batch.node_id[:12]}… has reputation {self.reputation.get(batch.node_id):.3f}, "
                f"under the floor {self.reputation.floor}; its batches are skipped"
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
        if len(times) + sum(node == batch.node_id for node, _ in self._pending.values()) >= limit:
            raise RateLimited(batch.node_id, f"{batch.node_id[:12]}… sent {len(times)} batches in the last "
                              f"{window / 60_000:.0f} min; the limit is {limit}" + ("" if trusted else
                              f" until its reputation reaches {self.config.trusted}"))
        if not trusted:
            self._newcomers[batch.node_id] = now_ms
        self._pending[batch.hash] = (batch.node_id, now_ms)

    def settle(self, batches: list[CompressedBatch]) -> None:
        """These pending batches were handled for good (stored, or refused for their content)."""
        for batch in batches:
            node, at = self._pending.pop(batch.hash, (batch.node_id, batch.timestamp_ms))
            self._recent.setdefault(node, deque()).append(at)
            self._seen[batch.hash] = batch.timestamp_ms
            self._prune(at)

    def release(self, batches: list[CompressedBatch]) -> None:
        """These pending batches were not stored: forget them, so a redelivery is admitted."""
        for batch in batches:
            self._pending.pop(batch.hash, None)

    def _prune(self, now_ms: int) -> None:
        # a hash older than the freshness window can never be accepted again, so forget it
        if len(self._seen) > 4096:
            horizon = now_ms - 2 * self.config.t_max_ms
            self._seen = {h: t for h, t in self._seen.items() if t >= horizon}
