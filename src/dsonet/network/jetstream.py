"""The NATS JetStream transport: batches travel through one replicated stream.

Every node reads the whole stream with its own durable pull consumer (explicit acks), so a
node that was down resumes where it stopped and a new node replays the history. A publish
returns only once the stream has acknowledged it (stored on a quorum of replicas). The
client reconnects on its own, to any server of the cluster, for as long as it lives.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import nats
import nats.errors
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from dsonet.codec.batch import MAX_BATCH_BYTES
from dsonet.network.transport import CHUNK, Handler, Message, TransportError, cancel_readers

log = logging.getLogger(__name__)


@dataclass
class NatsConfig:
    servers: list[str] = field(default_factory=lambda: ["nats://127.0.0.1:4222"])
    stream: str = "DSO"
    subject_prefix: str = "dso"
    replicas: int = 3  # one per site; a 3-replica stream keeps accepting with one server down
    max_age_s: float = 30 * 24 * 3600  # retention: how much history a new node can replay
    max_bytes: int = -1  # -1: bounded by age only
    duplicate_window_s: float = 120.0  # publishes with the same Nats-Msg-Id inside it are stored once
    publish_timeout_s: float = 5.0
    ack_wait_s: float = 30.0  # a fetched chunk not acked within this is delivered again
    connect_timeout_s: float = 30.0  # how long to wait for the cluster (and its stream) at start-up
    check_interval_s: float = 10.0  # a quiet reader checks that its consumer and the stream still exist

    def __post_init__(self) -> None:
        if not self.servers:
            raise TransportError("servers: give at least one NATS url, e.g. nats://127.0.0.1:4222")
        if self.replicas < 1 or self.replicas > 5:
            raise TransportError(f"replicas: {self.replicas}; JetStream allows 1 to 5 (use the number of sites, up to 5)")

    def stream_config(self) -> StreamConfig:
        return StreamConfig(
            name=self.stream,
            subjects=[f"{self.subject_prefix}.>"],
            retention=RetentionPolicy.LIMITS,  # keep history for replay; readers do not consume it
            storage=StorageType.FILE,
            num_replicas=self.replicas,
            max_age=self.max_age_s,
            max_bytes=self.max_bytes,
            max_msg_size=MAX_BATCH_BYTES + 64 * 1024,
            discard=DiscardPolicy.OLD,
            duplicate_window=self.duplicate_window_s,
        )


class NatsTransport:
    def __init__(self, nc: nats.NATS, config: NatsConfig):
        self.nc = nc
        self.js = nc.jetstream(timeout=config.publish_timeout_s)
        self.config = config
        self._tasks: list[asyncio.Task] = []
        self.closed = False
        self.repairs = 0  # times the stream or this reader's consumer was found gone and made again
        self.problem = ""  # the last thing found wrong with the stream, for /health

    @classmethod
    async def connect(cls, config: NatsConfig, name: str = "dsonet") -> "NatsTransport":
        """Connect to the cluster and make sure the stream exists (creating it on first use)."""

        async def on_error(exc: Exception) -> None:
            log.warning("nats: %s", exc)

        async def on_disconnect() -> None:
            log.warning("nats: disconnected; reconnecting")

        async def on_reconnect() -> None:
            log.info("nats: reconnected to %s", nc.connected_url.netloc if nc.connected_url else "?")

        try:
            nc = await nats.connect(
                config.servers, name=name, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                connect_timeout=2, allow_reconnect=True, error_cb=on_error, disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
            )
        except (OSError, nats.errors.Error) as exc:
            raise TransportError(f"servers: cannot reach any of {config.servers}: {exc}; is the cluster up "
                                 "(`dso cluster up`)?") from None
        transport = cls(nc, config)
        try:
            await transport._ensure_stream()
        except BaseException:
            await nc.close()
            raise
        return transport

    async def _ensure_stream(self) -> None:
        # Right after the servers start, JetStream may still be electing its meta leader: retry.
        deadline = time.monotonic() + self.config.connect_timeout_s
        while True:
            try:
                try:
                    info = await self.js.stream_info(self.config.stream)
                except nats.js.errors.NotFoundError:
                    await self.js.add_stream(self.config.stream_config())
                    return
                if info.config.num_replicas != self.config.replicas:
                    log.warning("stream %s has %s replicas, configured %s; keeping the stream's",
                                self.config.stream, info.config.num_replicas, self.config.replicas)
                return
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.APIError) as exc:
                if time.monotonic() > deadline:
                    raise TransportError(f"stream {self.config.stream}: JetStream did not answer within "
                                         f"{self.config.connect_timeout_s:.0f} s ({exc!r}); check the servers' logs") from None
                await asyncio.sleep(0.5)

    async def publish(self, payload: bytes, subject: str, headers: dict[str, str] | None = None) -> int:
        if self.closed:
            raise TransportError("publish on a closed transport")
        for attempt in range(2):
            try:
                ack = await self.js.publish(subject, payload, timeout=self.config.publish_timeout_s,
                                            stream=self.config.stream, headers=headers or None)
                return ack.seq
            except _NO_STREAM as exc:
                if attempt:  # the stream is gone (deleted by someone): make it again, once, and say so
                    raise TransportError(f"publish to {subject}: no stream ({exc!r}); kept for the next attempt") from None
                self.problem = f"{time.strftime('%H:%M:%S')}: the stream {self.config.stream} was missing; made again"
                log.error("nats: %s", self.problem)
                await self._ensure_stream()
                self.repairs += 1
            except (nats.errors.Error, asyncio.TimeoutError, OSError) as exc:
                raise TransportError(f"publish to {subject}: not acknowledged ({type(exc).__name__}: {exc}); "
                                     "kept for the next attempt") from None

    async def subscribe(self, durable: str, handler: Handler) -> None:
        psub = await self._pull(durable)
        self._tasks.append(asyncio.create_task(self._read(durable, psub, handler), name=f"nats-read-{durable}"))

    async def _pull(self, durable: str):
        consumer = ConsumerConfig(
            durable_name=durable, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            ack_wait=self.config.ack_wait_s, max_ack_pending=10 * CHUNK,
        )
        return await self.js.pull_subscribe(f"{self.config.subject_prefix}.>", durable=durable,
                                            stream=self.config.stream, config=consumer)

    async def _check(self, durable: str, psub):
        """A reader whose consumer (or the whole stream) was deleted would wait forever in silence:
        make them again, and say so loudly (log, /health, `repairs`)."""
        try:
            await self.js.consumer_info(self.config.stream, durable)
            return psub
        except nats.js.errors.NotFoundError as exc:
            self.problem = (f"{time.strftime('%H:%M:%S')}: the stream {self.config.stream} or consumer {durable} was "
                            f"deleted ({exc.description}); made again. Restrict who may administer the stream.")
            log.error("nats: %s", self.problem)
        await self._ensure_stream()
        self.repairs += 1
        return await self._pull(durable)

    async def _read(self, durable: str, psub, handler: Handler) -> None:
        idle_since = time.monotonic()
        while not self.closed:
            try:
                msgs = await psub.fetch(1, timeout=1.0)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                if time.monotonic() - idle_since > self.config.check_interval_s:  # quiet: is it still there?
                    idle_since = time.monotonic()
                    psub = await _or(self._check(durable, psub), psub)
                continue  # nothing new within the wait
            except (nats.errors.Error, asyncio.TimeoutError, OSError) as exc:
                if self.closed:
                    return
                log.warning("fetch failed (%s); checking the consumer", type(exc).__name__)
                psub = await _or(self._check(durable, psub), psub)
                await asyncio.sleep(0.5)
                continue
            idle_since = time.monotonic()
            # One message per pull: nats-py's multi-message fetch against nats-server 2.9 left messages
            # with an expired pull request, held back until ack_wait redelivered them (30 s stalls).
            while len(msgs) < CHUNK:
                try:
                    msgs += await psub.fetch(1, timeout=0.05)
                except (nats.errors.Error, asyncio.TimeoutError, OSError):
                    break
            chunk = [
                Message(m.data, m.subject, m.metadata.sequence.stream, int(m.metadata.timestamp.timestamp() * 1000),
                        dict(m.headers or {}))
                for m in msgs
            ]
            try:
                await handler(chunk)
            except Exception:  # not acked: JetStream delivers the chunk again after a short delay
                log.exception("handler failed on messages %d..%d", chunk[0].seq, chunk[-1].seq)
                for m in msgs:
                    await _quietly(m.nak(delay=1.0))
                continue
            for m in msgs:
                await _quietly(m.ack())

    async def close(self) -> None:
        self.closed = True
        await cancel_readers(self._tasks)
        try:
            await self.nc.flush(timeout=1)  # push out the last acks
        except (nats.errors.Error, asyncio.TimeoutError, OSError):
            pass
        await self.nc.close()


_NO_STREAM = (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError, nats.js.errors.NotFoundError)


async def _or(coro, fallback):
    """The coroutine's result, or ``fallback`` when the cluster cannot answer now (tried again later)."""
    try:
        return await coro
    except (nats.errors.Error, asyncio.TimeoutError, OSError, TransportError) as exc:
        log.warning("nats: cannot check the stream now (%s)", type(exc).__name__)
        return fallback


async def _quietly(coro) -> None:
    """An ack lost to a disconnect only means a redelivery, which handlers tolerate."""
    try:
        await coro
    except (nats.errors.Error, asyncio.TimeoutError, OSError) as exc:
        log.debug("ack/nak lost: %s", exc)
