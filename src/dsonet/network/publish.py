"""The publish room: what a node sends, from its stored experiences to the stream's acknowledgement.

    unpublished rows (their stored codes) ─ one batch per domain, signed ─ sent on this node's
    subject ─ acknowledged ─ marked published;  the outbox (signed tombstones) goes first

Publishing follows the federated-agents paper: a batch every ``batch_interval_s`` (60 s) or as
soon as ``batch_size`` (10) new experiences wait, one batch per domain (a subject per domain).
An experience counts as published only once the stream acknowledged its batch, and a tombstone
leaves the ledger's outbox only once acknowledged, so a node killed at any point publishes the
rest when it comes back. Signing runs off the event loop; library and ledger calls hold the
node's lock (``locked``, see `Node._locked`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable

from dsonet.codec import Profile, sign_batch
from dsonet.errors import DsoError
from dsonet.identity import NodeIdentity
from dsonet.network.stores import Stores
from dsonet.network.tombstone import make_tombstone
from dsonet.network.transport import MSG_ID, SENDER, Transport, subject_for

log = logging.getLogger(__name__)

BATCH, TOMBSTONE = "batch", "tombstone"


@dataclass(frozen=True)
class Schedule:
    """When and where a node publishes (`NodeConfig`'s fields of the same names)."""

    subject_prefix: str
    durable: str  # the node's name on the stream (its subjects')
    batch_interval_s: float
    batch_size: int
    max_batch_experiences: int


class Publisher:
    def __init__(self, identity: NodeIdentity, profile: Profile, transport: Transport, stores: Stores,
                 schedule: Schedule, *, locked: Callable[..., Awaitable], aside: Callable[..., Awaitable]):
        """``locked``: runs a library call holding the node's lock; ``aside``: runs work that touches no
        shared state off the event loop."""
        self.identity, self.node_id, self.profile, self.transport = identity, identity.node_id, profile, transport
        self.library, self.ledger, self.metrics, self.schedule = stores.library, stores.ledger, stores.metrics, schedule
        self._locked, self._aside = locked, aside
        self.pending = self.library.count_unpublished()  # own experiences waiting (an estimate between flushes)
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one publisher at a time: the schedule, a flush, a delete's tombstone
        self._task: asyncio.Task | None = None

    def start(self, before_flush: Callable[[], Awaitable]) -> None:
        """Publish on schedule from now on; ``before_flush``: awaited before each scheduled flush (the
        node drains the batches it holds back)."""
        self._task = asyncio.create_task(self._loop(before_flush), name=f"publish-{self.node_id[:8]}")
        if self.pending:
            self._wake.set()

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submitted(self) -> None:
        """One more own experience waits: a batch is due once ``batch_size`` of them do."""
        self.pending += 1
        if self.pending >= self.schedule.batch_size:
            self._wake.set()

    async def _loop(self, before_flush: Callable[[], Awaitable]) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.schedule.batch_interval_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                await before_flush()
                await self.flush()
            except Exception as exc:  # not acknowledged (or a bug): everything stays pending; retry soon
                log.warning("publish failed: %s", exc, exc_info=not isinstance(exc, DsoError))
                self.metrics.publish_failures.inc()
                await asyncio.sleep(min(1.0, self.schedule.batch_interval_s))
                self._wake.set()

    async def flush(self) -> int:
        """Publish every pending experience (and tombstone) now; return how many experiences were acknowledged."""
        async with self._lock:
            await self._send_outgoing()
            done = 0
            while True:
                exps, codes = await self._locked(self.library.unpublished, self.schedule.max_batch_experiences)
                if not exps:
                    self.pending = 0
                    return done
                for domain in sorted({e.domain for e in exps}):
                    rows = [i for i, e in enumerate(exps) if e.domain == domain]
                    batch = await self._aside(sign_batch, [exps[i] for i in rows], codes[rows], self.profile,
                                              self.identity)
                    payload = batch.to_msgpack()
                    await self.transport.publish(payload, self.subject(BATCH),
                                                 {MSG_ID: batch.hash, SENDER: self.node_id})
                    await self._locked(self.library.mark_published, list(batch.experiences))
                    self.metrics.published_batches.inc()
                    self.metrics.published_experiences.inc(len(batch))
                    self.metrics.published_bytes.inc(len(payload))
                    log.info("published batch %s: %d experiences of %s, %d bytes", batch.hash[:12], len(batch),
                             domain, len(payload))
                    done += len(batch)
                    self.pending = max(0, self.pending - len(batch))

    async def tombstone(self, exp_id: str) -> None:
        """Sign a tombstone for a deleted experience and send it; the outbox keeps it through a stream
        outage or a restart (`flush` sends what is left)."""
        tomb = make_tombstone([exp_id], self.identity)
        await self._locked(self.ledger.queue_outgoing, self.subject(TOMBSTONE), tomb.to_msgpack())
        try:
            async with self._lock:
                await self._send_outgoing()
        except DsoError as exc:
            log.warning("delete of %s is kept to publish later: %s", exp_id[:12], exc)

    def subject(self, kind: str) -> str:
        """This node's subject for ``kind``, named like its NATS user (`dsonet.network.auth`): the
        stream's per-subject limits then hold it alone."""
        return subject_for(self.schedule.subject_prefix, kind, self.schedule.durable)

    async def _send_outgoing(self) -> None:
        """Publish the outbox (signed tombstones), each under an id derived from its signed bytes:
        nobody can predict it, so nobody can make the stream drop it as a duplicate. Each goes to this
        node's tombstone subject, whatever subject it was queued under (one queued before member
        subjects would be refused by a secured cluster for ever)."""
        for digest, _, payload in await self._locked(self.ledger.outgoing):
            await self.transport.publish(payload, self.subject(TOMBSTONE),
                                         {SENDER: self.node_id, MSG_ID: f"tomb-{digest}"})
            await self._locked(self.ledger.sent, digest)
