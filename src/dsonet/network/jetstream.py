"""The NATS JetStream transport: batches travel through one replicated stream.

Every node reads the whole stream with its own durable pull consumer (explicit acks), so a
node that was down resumes where it stopped and a new node replays the history. A publish
returns only once the stream has acknowledged it (stored on a quorum of replicas). The
client reconnects on its own, to any server of the cluster, for as long as it lives.

On a cluster with users (`dso cluster up`), a node logs in with its own user, which may not
create the stream: a node that finds the stream missing says so on /health and keeps checking
instead of exiting, and one whose requests the server refuses names the refused subject.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

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
    max_bytes: int = -1  # -1: bounded by age only; `dso cluster up` keeps it under the servers' store
    # messages kept per subject, i.e. per member (each node publishes to its own subject); past it a
    # member's oldest go first, not other members': one member's flood rolls its own history
    member_max_msgs: int = 10_000
    duplicate_window_s: float = 120.0  # publishes with the same Nats-Msg-Id inside it are stored once
    publish_timeout_s: float = 5.0
    ack_wait_s: float = 30.0  # a fetched chunk not acked within this is delivered again
    connect_timeout_s: float = 30.0  # how long to wait for the cluster (and its stream) at start-up
    check_interval_s: float = 10.0  # a quiet reader checks that its consumer and the stream still exist
    user: str | None = None  # the NATS user to log in as (a node's: node-<id16>, see dsonet.network.auth)
    password: str | None = field(default=None, repr=False)
    tls_ca: Path | None = None  # CA file the servers' certificates are checked against (else the system's)
    tls_cert: Path | None = None  # client certificate, for servers that demand one (mutual TLS)
    tls_key: Path | None = None

    def __post_init__(self) -> None:
        if not self.servers:
            raise TransportError("servers: give at least one NATS url, e.g. nats://127.0.0.1:4222")
        if self.replicas < 1 or self.replicas > 5:
            raise TransportError(f"replicas: {self.replicas}; JetStream allows 1 to 5 (use the number of sites, up to 5)")
        if bool(self.user) != bool(self.password):
            missing = "password (a password file or DSONET_NATS_PASSWORD)" if self.user else "user"
            raise TransportError(f"NATS login: a user needs a password and a password a user; the {missing} is missing")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise TransportError("tls_cert and tls_key go together: give both the client certificate and its key")
        for name in ("tls_ca", "tls_cert", "tls_key"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise TransportError(f"{name}: {path} is not a file")

    @property
    def inbox_prefix(self) -> str:
        """A user's replies come under its own prefix (a cluster's node users may read only theirs)."""
        return f"_INBOX.{self.user}" if self.user else "_INBOX"

    def ssl_context(self) -> ssl.SSLContext | None:
        """None unless TLS is asked for (a tls:// url or any TLS file); then verify the servers, and
        show a client certificate when one is given."""
        if not (self.tls_ca or self.tls_cert or any(u.startswith("tls://") for u in self.servers)):
            return None
        context = ssl.create_default_context(cafile=str(self.tls_ca) if self.tls_ca else None)
        if self.tls_cert:
            context.load_cert_chain(str(self.tls_cert), str(self.tls_key))
        return context

    def stream_config(self) -> StreamConfig:
        return StreamConfig(
            name=self.stream,
            subjects=[f"{self.subject_prefix}.>"],
            retention=RetentionPolicy.LIMITS,  # keep history for replay; readers do not consume it
            storage=StorageType.FILE,
            num_replicas=self.replicas,
            max_age=self.max_age_s,
            max_bytes=self.max_bytes,
            max_msgs_per_subject=self.member_max_msgs,
            max_msg_size=MAX_BATCH_BYTES + 64 * 1024,
            discard=DiscardPolicy.OLD,  # a full stream drops its oldest: a publish is never refused for room
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
        self.refused: dict[str, float] = {}  # subjects (lower case) the server refused this user, and when

    @property
    def stream(self) -> str:
        return self.config.stream

    @classmethod
    async def connect(cls, config: NatsConfig, name: str = "dsonet") -> "NatsTransport":
        """Connect (and log in) to the cluster and make sure the stream exists, creating it on first use
        where this user may; where it may not, the transport opens all the same and ``problem`` says so."""

        transport: NatsTransport | None = None
        fatal: list[Exception] = []  # errors that retrying cannot mend: a refused login, a certificate not trusted
        nc = nats.NATS()

        async def on_error(exc: Exception) -> None:
            log.warning("nats: %s", exc)
            refused = _REFUSED.search(str(exc))
            if refused and transport is not None:  # the request itself just times out: remember why
                transport.refused[refused.group(1).lower()] = time.monotonic()  # nats-py lower-cases the error
            if transport is None and (isinstance(exc, ssl.SSLError) or "authorization violation" in str(exc).lower()):
                fatal.append(exc)

        async def on_disconnect() -> None:
            if transport is None or not transport.closed:
                log.warning("nats: disconnected; reconnecting")

        async def on_reconnect() -> None:
            log.info("nats: reconnected to %s", nc.connected_url.netloc if nc.connected_url else "?")

        login = {"user": config.user, "password": config.password} if config.user else {}
        tls = config.ssl_context()
        # nats-py retries a first connection for ever; wait for the cluster up to connect_timeout_s,
        # and give up at once on a refused login or an untrusted certificate
        connecting = asyncio.ensure_future(nc.connect(
            config.servers, name=name, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
            connect_timeout=2, allow_reconnect=True, error_cb=on_error, disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect, inbox_prefix=config.inbox_prefix, **login, **({"tls": tls} if tls else {}),
        ))
        deadline = time.monotonic() + config.connect_timeout_s
        while not connecting.done() and not fatal and time.monotonic() < deadline:
            await asyncio.wait({connecting}, timeout=0.1)
        if not (connecting.done() and not connecting.cancelled() and connecting.exception() is None):
            connecting.cancel()
            await asyncio.gather(connecting, return_exceptions=True)
            await nc.close()
            error = fatal[0] if fatal else None if connecting.cancelled() else connecting.exception()
            if error is not None and "authorization violation" in str(error).lower():
                who = f"user {config.user!r}" if config.user else "a client without a user"
                raise TransportError(f"servers: {config.servers} refused {who}: check --nats-user and its password "
                                     "file (`dso cluster add-node` prints both)")
            raise TransportError(f"servers: cannot reach any of {config.servers} within {config.connect_timeout_s:.0f} s"
                                 f"{f' ({error!r})' if error else ''}; is the cluster up (`dso cluster up`), and do "
                                 "its TLS settings match --nats-tls-*?")
        transport = cls(nc, config)
        try:
            await transport._ensure_stream()
        except BaseException:
            await nc.close()
            raise
        return transport

    async def _ensure_stream(self) -> bool:
        """True once the stream is there, made now if it was missing and this user may make it;
        False (and ``problem`` says why) when it is missing and the server refuses to let us make it."""
        # Right after the servers start, JetStream may still be electing its meta leader: retry.
        deadline = time.monotonic() + self.config.connect_timeout_s
        while True:
            asked = time.monotonic()
            try:
                try:
                    info = await self.js.stream_info(self.config.stream)
                except nats.js.errors.NotFoundError:
                    await self.js.add_stream(self.config.stream_config())
                    return True
                if info.config.num_replicas != self.config.replicas:
                    log.warning("stream %s has %s replicas, configured %s; keeping the stream's",
                                self.config.stream, info.config.num_replicas, self.config.replicas)
                return True
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.APIError) as exc:
                create = f"$JS.API.STREAM.CREATE.{self.config.stream}"
                if self._was_refused(create, asked):
                    self._report(f"the stream {self.config.stream} is missing, and user {self.config.user!r} may not "
                                 f"create it ({create} refused); ask the cluster's operator to create it "
                                 "(`dso cluster up` does)")
                    return False
                if self._was_refused(f"$JS.API.STREAM.INFO.{self.config.stream}", asked):
                    raise TransportError(f"stream {self.config.stream}: user {self.config.user!r} may not read it; "
                                         "is --stream the cluster's stream?") from None
                if time.monotonic() > deadline:
                    raise TransportError(f"stream {self.config.stream}: JetStream did not answer within "
                                         f"{self.config.connect_timeout_s:.0f} s ({exc!r}); check the servers' logs") from None
                await asyncio.sleep(0.5)

    def _was_refused(self, subject: str, since: float) -> bool:
        return self.refused.get(subject.lower(), -1.0) >= since

    def _report(self, problem: str) -> None:
        self.problem = f"{time.strftime('%H:%M:%S')}: {problem}"
        log.error("nats: %s", self.problem)

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
                if not await self._ensure_stream():
                    raise TransportError(f"publish to {subject}: {self.problem}; kept for the next attempt") from None
                self._report(f"the stream {self.config.stream} was missing; made again")
                self.repairs += 1
            except (nats.errors.Error, asyncio.TimeoutError, OSError) as exc:
                raise TransportError(f"publish to {subject}: not acknowledged ({type(exc).__name__}: {exc}); "
                                     "kept for the next attempt") from None

    async def subscribe(self, durable: str, handler: Handler) -> None:
        """Read with the durable consumer ``durable``; when it cannot be bound now (no stream, or
        the server refuses), ``problem`` says why and the reader keeps trying every check interval."""
        psub = await self._bind(durable)
        self._tasks.append(asyncio.create_task(self._read(durable, psub, handler), name=f"nats-read-{durable}"))

    async def _bind(self, durable: str):
        asked = time.monotonic()
        try:
            return await self._pull(durable)
        except nats.js.errors.NotFoundError:
            self._report(f"the stream {self.config.stream} is missing; reading resumes once it is made "
                         "(`dso cluster up` makes it)")
        except (nats.errors.TimeoutError, nats.js.errors.APIError) as exc:
            refused = [s for s in self.refused if self._was_refused(s, asked)]
            if not refused:
                raise
            self._report(f"user {self.config.user!r} may not use the consumer {durable} ({', '.join(refused)} refused; "
                         f"{type(exc).__name__}): a node's user is named after its key's consumer (node-<id16>), "
                         "give this node the user `dso cluster add-node` made for its key")
        return None

    async def _pull(self, durable: str):
        consumer = ConsumerConfig(
            durable_name=durable, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            ack_wait=self.config.ack_wait_s, max_ack_pending=10 * CHUNK,
        )
        return await self.js.pull_subscribe(f"{self.config.subject_prefix}.>", durable=durable,
                                            stream=self.config.stream, config=consumer)

    async def _check(self, durable: str, psub):
        """A reader whose consumer (or the whole stream) was deleted would wait forever in silence:
        make them again, and say so loudly (log, /health, `repairs`). None while that cannot be done."""
        if psub is not None:
            try:
                await self.js.consumer_info(self.config.stream, durable)
                return psub
            except nats.js.errors.NotFoundError as exc:
                self._report(f"the stream {self.config.stream} or consumer {durable} was deleted ({exc.description}); "
                             "made again. Restrict who may administer the stream (`dso cluster up` does).")
        if not await self._ensure_stream():
            return None
        psub = await self._bind(durable)
        if psub is not None:
            self.repairs += 1
        return psub

    async def _read(self, durable: str, psub, handler: Handler) -> None:
        idle_since = time.monotonic()
        while not self.closed:
            if psub is None:  # not bound (no stream, or refused): `problem` says why; try again later
                await asyncio.sleep(self.config.check_interval_s)
                psub = await _or(self._check(durable, None), None)
                if psub is not None:
                    self._report(f"reading with {durable} again, after: {self.problem}")
                continue
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
                        dict(m.headers or {}), m.metadata.num_pending or 0)
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
        try:
            await self.nc.close()
        except OSError as exc:  # the server had closed it (a revoked user, a server gone): closed all the same
            log.debug("nats: close: %s", exc)


_NO_STREAM = (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError, nats.js.errors.NotFoundError)
# what nats-server says (and nats-py hands to the error callback) when a user's publish is not allowed
_REFUSED = re.compile(r'permissions violation for publish to "?([^"\s]+)', re.IGNORECASE)


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
