"""The transport interface, and the in-process transport (the embedded default and the simulator).

A transport is an ordered, replicated log of opaque payloads with durable readers:

    seq = await t.publish(payload, subject, headers)   # returns once the log has stored it
    await t.subscribe(durable, handler)                # handler(list[Message]) in log order
    await t.close()

A durable reader resumes where it stopped: a chunk counts as read only after the handler
returns, so a node that dies mid-chunk reads it again (handlers must be idempotent).
Subjects are ``<prefix>.<kind>.<domain>``: one per domain, so a reader may filter.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Awaitable, Callable, Protocol

from dsonet.errors import DsoError

log = logging.getLogger(__name__)

CHUNK = 64  # messages handed to a handler at once: a DeltaSoup round sees them together
MSG_ID = "Nats-Msg-Id"  # the header JetStream deduplicates on; the in-process log honours it too
SENDER = "Dso-Node"  # the sender's node id, a hint only (lets a node skip its own batches unread)


class TransportError(DsoError):
    """A publish that was not acknowledged, or a transport that cannot be reached."""


@dataclass(frozen=True)
class Message:
    data: bytes
    subject: str
    seq: int  # position in the log, from 1
    timestamp_ms: int  # when the log stored it: the clock freshness is judged against on replay
    headers: dict[str, str] = field(default_factory=dict)
    pending: int = 0  # messages after this one in the log when the reader took it: its backlog


Handler = Callable[[list[Message]], Awaitable[None]]


class Transport(Protocol):
    problem: str  # the last thing found wrong with the log, for /health; "" while all is well

    @property
    def stream(self) -> str | None:
        """The retained log's name (a JetStream stream); None for one that lives in this process."""
        ...

    async def publish(self, payload: bytes, subject: str, headers: dict[str, str] | None = None) -> int: ...

    async def subscribe(self, durable: str, handler: Handler) -> None: ...

    async def close(self) -> None: ...


async def cancel_readers(tasks: list[asyncio.Task]) -> None:
    """Stop a transport's reader tasks and wait until they have stopped."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()


def subject_for(prefix: str, kind: str, token: str) -> str:
    """``dso.batch.math.geometry``: ``token`` a domain (dotted lower-case tags, valid NATS tokens as they
    are) or, where a node publishes, its NATS user's name (``dso.batch.node-0123456789abcdef``: one subject
    per member and kind, so that the stream's per-subject limits are per member, `NatsConfig.member_max_msgs`);
    a reader parses either as any subject, the member standing for the domain."""
    return f"{prefix}.{kind}.{token}"


@dataclass(frozen=True)
class Subject:
    prefix: str
    kind: str  # "batch" or "tombstone"
    domain: str


def parse_subject(subject: str) -> Subject | None:
    """The parts of a subject made by `subject_for`; None for anything else (a reader skips it)."""
    prefix, _, rest = subject.partition(".")
    kind, _, domain = rest.partition(".")
    return Subject(prefix, kind, domain) if prefix and kind and domain else None


class InProcessHub:
    """One shared log for many nodes in one process (one asyncio loop); no server.

    Keeps the durable readers' positions, so a node that closes and re-subscribes under the
    same name resumes, and a new name replays the whole history, as with JetStream.
    """

    def __init__(self, duplicate_window_s: float = 120.0, clock: Callable[[], float] = time.time):
        """``clock``: seconds since the epoch when a message is stored (a simulation runs its own)."""
        self.clock = clock
        self.log: list[Message] = []
        self.positions: dict[str, int] = {}
        self.duplicate_window_s = duplicate_window_s
        self._seen_ids: dict[str, float] = {}
        self._changed: asyncio.Event | None = None

    def transport(self) -> "InProcessTransport":
        return InProcessTransport(self)

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def append(self, payload: bytes, subject: str, headers: dict[str, str]) -> int:
        now = self.clock()
        msg_id = headers.get(MSG_ID)
        if msg_id is not None:
            self._seen_ids = {k: t for k, t in self._seen_ids.items() if now - t < self.duplicate_window_s}
            if msg_id in self._seen_ids:
                return next(m.seq for m in reversed(self.log) if m.headers.get(MSG_ID) == msg_id)
            self._seen_ids[msg_id] = now
        msg = Message(bytes(payload), subject, len(self.log) + 1, int(now * 1000), dict(headers))
        self.log.append(msg)
        event = self._event()
        event.set()  # wake every reader, then re-arm
        self._changed = asyncio.Event()
        return msg.seq


    async def drained(self, durables: list[str], timeout_s: float = 120.0) -> None:
        """Wait until every named durable reader has read (and handled) the whole log."""
        deadline = time.monotonic() + timeout_s
        while not all(self.positions.get(d, 0) >= len(self.log) for d in durables):
            if time.monotonic() > deadline:
                raise TransportError(f"readers {durables} did not read the log of {len(self.log)} messages "
                                     f"within {timeout_s} s")
            await asyncio.sleep(0.01)


class InProcessTransport:
    stream = None  # the hub's log ends with the process: there is no retained history to read again

    def __init__(self, hub: InProcessHub):
        self.hub = hub
        self._tasks: list[asyncio.Task] = []
        self.closed = False
        self.problem = ""

    async def publish(self, payload: bytes, subject: str, headers: dict[str, str] | None = None) -> int:
        if self.closed:
            raise TransportError("publish on a closed transport; open a new one from the hub")
        return self.hub.append(payload, subject, headers or {})

    async def subscribe(self, durable: str, handler: Handler) -> None:
        self.hub.positions.setdefault(durable, 0)
        self._tasks.append(asyncio.create_task(self._read(durable, handler), name=f"inproc-read-{durable}"))

    async def _read(self, durable: str, handler: Handler) -> None:
        while not self.closed:
            pos = self.hub.positions[durable]
            chunk = self.hub.log[pos:pos + CHUNK]
            if not chunk:
                await self.hub._event().wait()
                continue
            behind = len(self.hub.log) - pos - len(chunk)
            chunk = [replace(m, pending=behind + len(chunk) - 1 - i) for i, m in enumerate(chunk)]
            try:
                await handler(chunk)
            except Exception:  # a handler bug must not kill the reader; the chunk is read again
                log.exception("handler failed on messages %d..%d; retrying", chunk[0].seq, chunk[-1].seq)
                await asyncio.sleep(1.0)
                continue
            self.hub.positions[durable] = pos + len(chunk)

    async def close(self) -> None:
        self.closed = True
        await cancel_readers(self._tasks)
