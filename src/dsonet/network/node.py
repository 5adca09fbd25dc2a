"""The node service: identity, library, DeltaSoup and a transport, driven by one asyncio loop.

    node = await Node.open(NodeConfig(data_dir), transport)   # transport: in-process or NATS
    await node.start()                                        # read the stream, publish on schedule
    exp = await node.submit("When X, do Y", domain="math")    # stored now, published later
    hits = await node.search("how do I ...")
    await node.close()                                        # flushes what is pending

Publishing follows the federated-agents paper: a batch every ``batch_interval_s`` (60 s) or as
soon as ``batch_size`` (10) new experiences wait, one batch per domain (a subject per domain).
An experience counts as published only once the stream acknowledged its batch, so a node
killed at any point publishes the rest when it comes back.

Reading: every message of the stream goes through DeltaSoup; each chunk of messages is one
round, and a chunk is acknowledged only after its round is in the library. Freshness is judged
against the time the stream stored the message, so a node replaying old history does not
reject it as stale while a fresh replay of an old batch still is.

Threads (see `dsonet.network.access`): DeltaSoup and ingest run on one worker thread, in
stream order; agents' calls (search, reads, submissions, publishing) run on a small pool of
reader threads. Both hold the library's `FairLock` for each library call, and ingest holds it
for one turn of at most `TURN_ROWS` rows (one full batch, or several small ones, each its own
transaction), so a search waits for at most one turn, never for a whole round, and never sees
half a batch. Near-duplicates among new rows are merged after each read of the stream, and
the index's sketch and subspace are fitted again as the library outgrows them, both off the
lock (`Library.rebuild_merged`, `Library.refit_index`). Encoding never runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dsonet.aggregate import AggregationError, DeltaSoup, DeltaSoupConfig, RateLimited, RoundResult
from dsonet.codec import CompressedBatch, Profile, default_profile, profile_of, sign_batch
from dsonet.codec.batch import MAX_EXPERIENCES
from dsonet.errors import BatchError, DsoError
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.library import Hit, Hits, Library, LibraryError, MergeRule
from dsonet.library.store import DamagedFile
from dsonet.library.merge import THETA_DUP
from dsonet.library.quarantine import row_damage
from dsonet.library.policy import MAX_TOKENS, K
from dsonet.library.retrievals import Retrievals
from dsonet.network.access import FairLock, SerialEncoder
from dsonet.network.ledger import Ledger
from dsonet.network.metrics import NodeMetrics
from dsonet.network.standing import Banned, Bans, check_key
from dsonet.network.tombstone import TombstoneError, decode_tombstone, make_tombstone
from dsonet.network.transport import MSG_ID, SENDER, Message, Transport, member_subject, parse_subject

log = logging.getLogger(__name__)

BATCH, TOMBSTONE = "batch", "tombstone"
MAX_PEERS = 1024
REFERENCE_ROWS = 256  # trusted rows (own, then trusted peers') added to every round's pool (see `_round`)
MAX_ROUND_ROWS = 4096  # a round closes early once this many rows wait
# Batches held back from senders over their rate, in the library file (see `_defer_or_reject`), in
# bytes: 5 keys once holding 500 payloads of 1.49 MB each (counted, not weighed) took 745 MB (issue 24).
# An honest batch of 10 rows at d = 7680 is ~15 KB, so a share holds thousands of them.
DEFERRED_BYTES = 256 * 2**20  # the whole queue; a trusted key may hold up to all of it
DEFERRED_KEY_BYTES = 32 * 2**20  # one key admitted before, not yet trusted
DEFERRED_NEW_KEYS_BYTES = 32 * 2**20  # all keys never admitted, together: Sybil keys share one share
NEW_KEYS = "(new keys)"  # the share those count against
DEFERRED_PAGE = 8  # payloads read at a time (at most 8 × 4 MiB): the queue is never read whole
TURN_ROWS = MAX_EXPERIENCES  # rows stored per turn on the library's lock: a search waits for at most this many
READERS = 4  # threads answering agents' calls; library calls take turns, query encoding may overlap them


class NodeError(DsoError, ValueError):
    """A request the node refuses (wrong vector dimension, non-finite values, unknown id...)."""


@dataclass
class NodeConfig:
    data_dir: Path
    encoder: str | None = "default"  # an encoder spec (default = MiniLM + Zen head, 7680 dims), or None: vectors must be given
    dim: int | None = None  # the profile's dimension when there is no encoder
    encoder_id: str = "none"  # names the space when there is no encoder (peers must agree on it)
    batch_interval_s: float = 60.0  # the paper: broadcast every 60 s ...
    batch_size: int = 10  # ... or after 10 new experiences
    max_batch_experiences: int = 100  # a long outage is published in batches of at most this many
    subject_prefix: str = "dso"
    # rows kept (those of signers not yet trusted evicted first, own rows last): a flood cannot fill the disk
    capacity: int | None = 200_000
    soup: dict[str, Any] = field(default_factory=dict)  # DeltaSoupConfig overrides
    # The paper's coordinate-wise MAD rule ("deltasoup") drops 90-100 % of honest rows on real
    # BitDelta codes (MiniLM, g = d: each ê is ē + α·s, so per-coordinate MADs are tiny); "median"
    # (distance to the coordinate median, robust z-score) keeps ~95 % and still drops random rows.
    rule: str = "median"
    theta_dup: float = THETA_DUP  # the merged view's duplicate threshold (`dsonet.library.merge`)
    model: str = ""  # recorded in provenance
    # Encode peers' texts too and keep the floats on disk: exact ranking of their experiences
    # (recall@10 1.0 instead of ~0.93 from codes alone) for the encoder's time and 30 KB a row.
    encode_texts: bool = False

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if self.encoder is None and self.dim is None:
            raise NodeError("dim: a node without an encoder needs the profile's dimension (--dim)")
        if self.encode_texts and self.encoder is None:
            raise NodeError("encode_texts: a node without an encoder cannot encode peers' texts; give --encoder")
        if self.batch_interval_s <= 0 or self.batch_size < 1:
            raise NodeError(f"batch_interval_s ({self.batch_interval_s}) must be > 0 and batch_size "
                            f"({self.batch_size}) >= 1")


@dataclass
class Peer:
    node_id: str
    accepted: int = 0
    rejected: int = 0
    last_seen_ms: int = 0
    last_error: str = ""


class Node:
    def __init__(self, config: NodeConfig, identity: NodeIdentity, transport: Transport, profile: Profile,
                 encoder=None):
        self.config, self.identity, self.transport, self.profile = config, identity, transport, profile
        self.encoder = None if encoder is None else SerialEncoder(encoder)  # shared by the ingest and reader threads
        self.node_id = identity.node_id
        self.durable = f"node-{self.node_id[:16]}"  # this node's reader of the stream
        self.metrics = NodeMetrics()
        self.peers: dict[str, Peer] = {}
        self.started_ms = int(time.time() * 1000)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"node-{self.node_id[:8]}")  # ingest, in stream order
        self._readers = ThreadPoolExecutor(READERS, thread_name_prefix=f"node-{self.node_id[:8]}-read")
        self._state = FairLock()  # held for every library call (see the module doc)
        self._merge_queued = False
        self._seen_pruned_ms = 0  # when the library last forgot stored batches' hashes (stream time)
        self._wake = asyncio.Event()
        self._pending = 0
        self._publisher: asyncio.Task | None = None
        self._publish_lock = asyncio.Lock()
        self.library = None
        self.ledger: Ledger | None = None  # deferred batches, outbox, seen hashes: in the library's file
        self.soup = None
        self.bans: Bans | None = None  # keys the operator banned (`dsonet.network.standing`), read at open
        self.closed = False
        self.on_round: Callable[[RoundResult], None] | None = None  # sees every DeltaSoup round (benchmarks)
        self.retrievals = Retrievals()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(cls, config: NodeConfig, transport: Transport, identity: NodeIdentity | None = None,
                   encoder=None, profile: Profile | None = None) -> "Node":
        """``encoder``: an encoder object to use instead of loading ``config.encoder`` (one model
        shared by the nodes of a process). ``profile``: the network's profile when it is not the
        encoder's default (a simulation's own space and baseline)."""
        config.data_dir.mkdir(parents=True, exist_ok=True)
        identity = identity or NodeIdentity.load_or_create(config.data_dir / "node.key")
        encoder = encoder or _load_encoder(config.encoder)
        if profile is None:
            profile = profile_of(encoder) if encoder else default_profile(config.dim, config.encoder_id)
        node = cls(config, identity, transport, profile, encoder)
        try:
            await node._ingest(node._open_state)
        except DamagedFile as exc:
            node._worker.shutdown()
            node._readers.shutdown()
            raise NodeError(f"{exc}{node._rebuild_hint()}") from None
        return node

    def _rebuild_hint(self) -> str:
        """What an empty library gets from the stream: this node's consumer resumes where it stopped, so
        only new batches come unless the consumer is deleted; its own batches it skips when reading."""
        stream = getattr(getattr(self.transport, "config", None), "stream", None)
        if stream is None:
            return ""  # an in-process log: nothing to read again
        return (f", which then takes new batches only; to read the stream's retained history again (peers' "
                f"experiences; this node's own come back from a backup only), first delete this node's consumer: "
                f"nats consumer rm {stream} {self.durable}")

    def _open_state(self) -> None:
        soup_config = DeltaSoupConfig(**self.config.soup)
        self.soup = DeltaSoup(config=soup_config, profiles=[self.profile], rule=self.config.rule, encoder=self.encoder)
        self.library = Library(self.config.data_dir / "library.sqlite", encoder=self.encoder, profile=self.profile,
                               capacity=self.config.capacity, merge=MergeRule(self.config.theta_dup),
                               trust=self._trust, defer_merge=True, trusted=soup_config.trusted)
        self.library.heal()  # rows damaged in the file are set aside now, not met by a search later
        self.ledger = Ledger(self.library.db)
        self._pending = self.library.count_unpublished()
        self.bans = Bans(self.library.rows)
        # replay protection outlives a restart: the batches stored within the freshness window (with
        # the gate's margin for clock skew) are refused again; older ones are stale anyway
        self._seen_pruned_ms = int(time.time() * 1000)
        self.soup.remember(self.ledger.seen(self._seen_pruned_ms - self._seen_window_ms))

    @property
    def _seen_window_ms(self) -> int:
        return 2 * self.soup.config.t_max_ms

    def _trust(self, signer: str) -> float:
        """A signer's weight in the merged view: 1 for this node's own rows, else its reputation, and
        0 (its rows hidden from searches) once it has fallen under the reputation floor."""
        if signer == self.node_id:
            return 1.0
        if self.bans is not None and signer in self.bans:
            return 0.0
        return 0.0 if self.soup.reputation.skipped(signer) else self.soup.reputation.get(signer)

    async def start(self) -> None:
        """Read the stream with this node's durable consumer and start the publishing schedule."""
        await self.transport.subscribe(self.durable, self._on_messages)
        self._publisher = asyncio.create_task(self._publish_loop(), name=f"publish-{self.node_id[:8]}")
        if self._pending:
            self._wake.set()

    async def close(self) -> None:
        """Graceful shutdown: publish what is pending, then close the transport and the library."""
        if self.closed:
            return
        self.closed = True
        if self._publisher:
            self._publisher.cancel()
            await asyncio.gather(self._publisher, return_exceptions=True)
        try:
            await self.flush()
        except DsoError as exc:
            log.warning("shutdown: %s; the rest is published at the next start", exc)
        await self.transport.close()
        self._worker.shutdown(wait=True)  # what is queued there (a merge after a submit) runs first
        await self._locked(self._close_state)
        self._readers.shutdown(wait=True)

    def _close_state(self) -> None:
        close = getattr(self.library, "close", None)
        if close:
            close()

    async def _ingest(self, fn: Callable, *args, **kwargs):
        """Run on the ingest thread (DeltaSoup state belongs to it), after what is queued there."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, lambda: fn(*args, **kwargs))

    async def _locked(self, fn: Callable, *args, **kwargs):
        """Run a library call on a reader thread, holding the library's lock: it waits for at most the
        turn being stored, not for the ingest thread's queue."""
        def call():
            with self._state:
                return self._healing(fn, *args, **kwargs)

        return await asyncio.get_running_loop().run_in_executor(self._readers, call)

    def _healing(self, fn: Callable, *args, **kwargs):
        """``fn``, called again once the rows damaged since open are quarantined, if that is why it
        failed (`dsonet.library.quarantine`): the node serves the rest, without a traceback."""
        try:
            return fn(*args, **kwargs)
        except (sqlite3.OperationalError, ValueError) as exc:
            if not row_damage(exc) or not self.library.heal():
                raise
        return fn(*args, **kwargs)

    async def _aside(self, fn: Callable, *args):
        """Run work that touches no shared state (encoding, signing) on a reader thread, off the loop."""
        return await asyncio.get_running_loop().run_in_executor(self._readers, fn, *args)

    async def _encode(self, texts: list[str], kind: str) -> np.ndarray:
        return await self._aside(self.encoder.encode, texts, kind)

    # ------------------------------------------------------------------ agent-facing API

    async def submit(self, text: str, domain: str = "general", confidence: float = 0.5,
                     vector: np.ndarray | list | None = None) -> Experience:
        """Store one experience now (encoding its text unless a vector in the profile's space is given)."""
        prov = Provenance(self.node_id, self.config.model, int(time.time() * 1000), 0)
        if vector is None:
            if self.encoder is None:
                raise NodeError("vector: this node has no encoder; send the text's vector "
                                f"({self.profile.dim} numbers in the profile's space)")
            exp = Experience(text, domain, confidence, prov)  # checks the text before it is encoded
            v = (await self._encode([text], "document"))[0]
        else:
            v = self.check_vector(vector, "vector")
            exp = Experience(text, domain, confidence, prov)
        await self._locked(self.library.add_vectors, [exp], v[None, :])
        self._schedule_merge()
        self.metrics.submitted.inc()
        self._pending += 1
        if self._pending >= self.config.batch_size:
            self._wake.set()
        return exp

    async def search(self, query: str | None = None, vector: np.ndarray | list | None = None, k: int = K,
                     min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
                     domain: str | None = None) -> Hits:
        """The library's hits for a query (encoded here) or a vector; ``min_similarity`` None: the
        threshold calibrated for the library's space."""
        if (query is None) == (vector is None):
            raise NodeError("query/vector: give exactly one of them")
        t = time.perf_counter()
        if vector is not None:
            q = self.check_vector(vector, "vector")
        else:
            if self.encoder is None:
                raise NodeError("query: this node has no encoder; search with a vector instead")
            q = (await self._encode([query], "query"))[0]
        hits = await self._locked(self.library.search_vector, q, k, min_similarity, domain, max_tokens)
        self.metrics.search_seconds.observe(time.perf_counter() - t)
        return hits

    async def recall(self, query: str | None = None, vector: np.ndarray | list | None = None, k: int = K,
                     min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
                     domain: str | None = None) -> tuple[str | None, Hits]:
        """`search`, with a retrieval id to report the outcome under (`outcome`; None when nothing was found)."""
        hits = await self.search(query, vector, k, min_similarity, max_tokens, domain)
        return self.retrievals.issue(hits), hits

    async def outcome(self, retrieval_id: str, helped: bool | None = None,
                      lessons: dict[str, bool] | None = None) -> int:
        """Whether the lessons of a retrieval this node issued helped, all together (``helped``) or each
        on its own (``lessons``: experience id -> helped; lessons not named get no outcome: an agent
        that tried its task without each lesson knows which one made the difference). Returns how many
        were judged. Raises `UnknownRetrieval` for an id it did not issue or whose outcome is in already."""
        if (helped is None) == (lessons is None):
            raise NodeError("outcome: give helped (every lesson of the retrieval) or lessons (id -> helped), one of them")
        try:
            hits = self.retrievals.take(retrieval_id, lessons or ())
        except ValueError as exc:
            raise NodeError(str(exc)) from None
        verdicts = {h.experience.id: helped for h in hits} if lessons is None else lessons
        for verdict in (True, False):
            judged = [h for h in hits if verdicts.get(h.experience.id) is verdict]
            if judged:
                await self.record_outcome(judged, verdict)
                self.metrics.outcomes.labels(helped=str(verdict).lower()).inc()
        return sum(1 for h in hits if h.experience.id in verdicts)

    async def record_outcome(self, hits: list[Hit], helped: bool) -> None:
        """Whether the experiences of a search helped the task they were retrieved for: counted on
        every merged row (eviction by usefulness) and fed to each peer signer's reputation
        (DeltaSoup's feedback defence). Reputation belongs to the ingest thread (a round updates it
        too), so this runs there, in order with the rounds."""
        await self._ingest(self._record_outcome, hits, helped)

    def _record_outcome(self, hits: list[Hit], helped: bool) -> None:
        for hit in hits:
            for exp_id in hit.members or (hit.experience.id,):
                with self._state:
                    self.library.record_outcome(exp_id, helped)
            for signer in hit.sources:
                if signer != self.node_id:
                    self.soup.record_outcome(signer, helped)

    async def all(self) -> list[Experience]:
        return await self._locked(self.library.all)

    async def get(self, exp_id: str):
        return await self._locked(self.library.get, exp_id)

    async def delete(self, exp_id: str) -> bool:
        """Delete locally and publish a signed tombstone (peers honour it for experiences we authored)."""
        removed = await self._locked(self.library.delete, exp_id)
        if removed:
            self._schedule_merge()
            tomb = make_tombstone([exp_id], self.identity)
            # the outbox keeps it through a stream outage or a restart; `flush` sends what is left
            await self._locked(self.ledger.queue_outgoing, self._subject(TOMBSTONE), tomb.to_msgpack())
            self.metrics.deleted.inc()
            try:
                async with self._publish_lock:
                    await self._send_outgoing()
            except DsoError as exc:
                log.warning("delete of %s is kept to publish later: %s", exp_id[:12], exc)
        return removed

    def _subject(self, kind: str) -> str:
        """This node's subject for ``kind``, named like its NATS user (`dsonet.network.auth`): the
        stream's per-subject limits then hold it alone."""
        return member_subject(self.config.subject_prefix, kind, self.durable)

    async def _send_outgoing(self) -> None:
        """Publish the outbox (signed tombstones), each under an id derived from its signed bytes:
        nobody can predict it, so nobody can make the stream drop it as a duplicate. Each goes to this
        node's tombstone subject, whatever subject it was queued under (one queued before member
        subjects would be refused by a secured cluster for ever)."""
        for digest, _, payload in await self._locked(self.ledger.outgoing):
            await self.transport.publish(payload, self._subject(TOMBSTONE),
                                         {SENDER: self.node_id, MSG_ID: f"tomb-{digest}"})
            await self._locked(self.ledger.sent, digest)

    # ------------------------------------------------------------------ operator (`dsonet.network.admin`)

    async def keys(self) -> list[dict]:
        """Every key this node has heard from or banned: its reputation, batches accepted and
        rejected, batches held back, and whether it is banned."""
        rep, banned = self.soup.reputation, self.bans.keys
        peers = {p.node_id: p for p in list(self.peers.values())}  # one copy: the ingest thread adds peers
        names = sorted(set(peers) | banned)
        held = await self._locked(lambda: {k: self.ledger.count_deferred(k) for k in names})
        return [{"node_id": k, "reputation": round(rep.get(k), 4), "banned": k in banned,
                 "accepted": peers[k].accepted if k in peers else 0, "rejected": peers[k].rejected if k in peers else 0,
                 "deferred": held[k], "last_error": peers[k].last_error if k in peers else ""} for k in names]

    async def ban(self, key: str) -> dict:
        """Refuse a key's batches, hide its rows and drop what it has waiting (`dsonet.network.standing`)."""
        check_key(key)

        def apply() -> int:
            self.bans.add(key)
            return self.ledger.drop_deferred(key)

        dropped = await self._locked(apply)
        log.warning("key %s banned by the operator: its rows hidden, %d held-back batches dropped", key[:12], dropped)
        return {"node_id": key, "banned": True, "deferred_dropped": dropped}

    async def reset(self, key: str) -> dict:
        """Lift a key's ban and start it again from the initial reputation, its counts at zero."""
        check_key(key)
        lifted = await self._locked(self.bans.remove, key)
        await self._ingest(self.soup.reputation.forget, key)  # reputation belongs to the ingest thread
        self.peers.pop(key, None)
        log.warning("key %s reset by the operator%s", key[:12], " (ban lifted)" if lifted else "")
        return {"node_id": key, "banned": False, "ban_lifted": lifted, "reputation": self.soup.reputation.get(key)}

    async def quarantined(self, limit: int = 1000) -> list[dict]:
        """Rows set aside as damaged (`dsonet.library.quarantine`)."""
        return [q.to_dict() for q in await self._locked(self.library.quarantine_list, limit)]

    async def drop_quarantined(self, seqs: list[int] | None = None) -> int:
        """Forget quarantined rows (all when ``seqs`` is None); returns how many."""
        return await self._locked(self.library.quarantine_drop, seqs)

    async def stats(self) -> dict:
        lib = await self._locked(self.library.stats)
        return {"node_id": self.node_id, "profile": self.profile.to_dict(), "library": lib,
                "pending": self._pending, "uptime_s": round(time.time() - self.started_ms / 1000, 1),
                "published_batches": int(self.metrics.registry.get_sample_value("dso_published_batches_total") or 0),
                "batch_interval_s": self.config.batch_interval_s, "batch_size": self.config.batch_size}

    def peer_list(self) -> list[dict]:
        rep = self.soup.reputation
        peers = list(self.peers.values())  # one C-level copy: the ingest thread may add peers meanwhile
        return [{**vars(p), "reputation": round(rep.get(p.node_id), 4)} for p in peers]

    def check_vector(self, vector, field_name: str) -> np.ndarray:
        try:
            v = np.asarray(vector, dtype=np.float32)
        except (TypeError, ValueError):
            raise NodeError(f"{field_name}: expected a list of {self.profile.dim} numbers") from None
        if v.shape != (self.profile.dim,):
            raise NodeError(f"{field_name}: {v.shape[0] if v.ndim == 1 else v.shape} values, but this network's "
                            f"profile has dimension {self.profile.dim}")
        if not np.isfinite(v).all():
            raise NodeError(f"{field_name}: contains NaN or Inf at index {int(np.flatnonzero(~np.isfinite(v))[0])}")
        norm = float(np.linalg.norm(v.astype(np.float64)))  # float64: 1e20 in every coordinate must not overflow
        if norm == 0.0:
            raise NodeError(f"{field_name}: the zero vector has no direction; send an embedding")
        unit = (v.astype(np.float64) / norm).astype(np.float32)
        if abs(float(np.linalg.norm(unit)) - 1.0) > 1e-3:
            raise NodeError(f"{field_name}: has no direction a float32 vector can hold (norm {norm:.3g}); "
                            "send an embedding")
        return unit

    # ------------------------------------------------------------------ publishing

    async def _publish_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.batch_interval_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._ingest(self._drain_deferred)
                await self.flush()
            except Exception as exc:  # not acknowledged (or a bug): everything stays pending; retry soon
                log.warning("publish failed: %s", exc, exc_info=not isinstance(exc, DsoError))
                self.metrics.publish_failures.inc()
                await asyncio.sleep(min(1.0, self.config.batch_interval_s))
                self._wake.set()

    async def flush(self) -> int:
        """Publish every pending experience (and tombstone) now; return how many experiences were acknowledged."""
        async with self._publish_lock:
            await self._send_outgoing()
            done = 0
            while True:
                exps, codes = await self._locked(self.library.unpublished, self.config.max_batch_experiences)
                if not exps:
                    self._pending = 0
                    return done
                for domain in sorted({e.domain for e in exps}):
                    rows = [i for i, e in enumerate(exps) if e.domain == domain]
                    batch = await self._aside(sign_batch, [exps[i] for i in rows], codes[rows], self.profile,
                                              self.identity)
                    payload = batch.to_msgpack()
                    await self.transport.publish(payload, self._subject(BATCH),
                                                 {MSG_ID: batch.hash, SENDER: self.node_id})
                    await self._locked(self.library.mark_published, [e.id for e in batch.experiences])
                    self.metrics.published_batches.inc()
                    self.metrics.published_experiences.inc(len(batch))
                    self.metrics.published_bytes.inc(len(payload))
                    log.info("published batch %s: %d experiences of %s, %d bytes", batch.hash[:12], len(batch),
                             domain, len(payload))
                    done += len(batch)
                    self._pending = max(0, self._pending - len(batch))

    # ------------------------------------------------------------------ reading

    async def _on_messages(self, chunk: list[Message]) -> None:
        await self._ingest(self._read_chunk, chunk)

    def _read_chunk(self, chunk: list[Message]) -> None:
        try:
            self._handle_chunk(chunk)
        except (sqlite3.OperationalError, ValueError) as exc:  # a damaged row read while judging a round
            with self._state:
                if not row_damage(exc) or not self.library.heal():
                    raise
            self._handle_chunk(chunk)

    def _handle_chunk(self, chunk: list[Message]) -> None:
        """Runs on the ingest thread: verify every batch into the soup; a tombstone first closes
        the round so far (so it can find what it deletes), then applies. Batches held back from
        senders over their rate go first, into the same round. The library's lock is taken for
        each library call only (see the module doc)."""
        last_ms = chunk[-1].timestamp_ms
        resubmitted = self._submit_deferred(last_ms)
        for msg in chunk:
            if msg.headers.get(SENDER) == self.node_id:
                continue  # our own message: its experiences are in the library already
            self.metrics.received.inc()
            if msg.headers.get(SENDER, "") in self.bans:  # a header naming a banned key drops only its own message
                self._reject(msg.headers[SENDER], Banned(msg.headers[SENDER]))
                continue
            subject = parse_subject(msg.subject)
            if subject is not None and subject.kind == TOMBSTONE:
                self._round(msg.timestamp_ms)
                with self._state:
                    self._apply_tombstone(msg)
                continue
            if self.soup.queued_rows > MAX_ROUND_ROWS - MAX_EXPERIENCES:
                self._round(msg.timestamp_ms)  # a round's decompressed rows stay within ~125 MB at d = 7680
            try:
                self.soup.submit(msg.data, now_ms=msg.timestamp_ms)
            except RateLimited as exc:
                self._defer_or_reject(msg, exc)
            except (BatchError, AggregationError) as exc:
                self._reject(msg.headers.get(SENDER, "unknown"), exc)
        self._round(last_ms)
        with self._state:
            self.ledger.undefer(resubmitted)  # only once their round is stored
        self._merge()

    def _defer_or_reject(self, msg: Message, exc: RateLimited) -> None:
        """A batch over its sender's rate is held back, not dropped (a replay's backlog is no attack):
        it waits in the library file and is submitted again with later rounds, in the order it came
        (`_submit_deferred`). Bounded in bytes: a key admitted before holds up to `DEFERRED_KEY_BYTES`
        (a trusted one, the whole queue), keys never admitted share `DEFERRED_NEW_KEYS_BYTES`, all
        of them `DEFERRED_BYTES`; a batch past its share is rejected."""
        signer, size = exc.node_id, len(msg.data)
        peer = self.peers.get(signer)
        if peer is not None and peer.accepted > 0:
            trusted = self.soup.reputation.get(signer) >= self.soup.config.trusted
            share, cap = signer, DEFERRED_BYTES if trusted else DEFERRED_KEY_BYTES
        else:
            share, cap = NEW_KEYS, DEFERRED_NEW_KEYS_BYTES
        with self._state:
            room = (self.ledger.deferred_bytes() + size <= DEFERRED_BYTES
                    and self.ledger.deferred_bytes(share) + size <= cap)
            if room:
                self.ledger.defer(msg.data, msg.timestamp_ms, signer, share)
        if room:
            self.metrics.deferred_batches.inc()
            return
        self._reject(signer, exc)

    def _submit_deferred(self, now_ms: int) -> list[str]:
        """Submit the held-back batches again (fresh as of when they were received), each signer's in
        the order they came, a page at a time; a signer's turn ends at its first batch still over
        its rate (the later ones would be too, and must not overtake it), and the pass ends once the
        round is full. Returns the digests that left the queue, admitted or refused for good."""
        done: list[str] = []
        with self._state:
            signers = self.ledger.deferred_signers()
        for signer in signers:
            after = 0
            while self.soup.queued_rows <= MAX_ROUND_ROWS - MAX_EXPERIENCES:
                with self._state:  # its oldest alone first: while that is still early, one payload is read
                    page = self.ledger.deferred(signer, after, DEFERRED_PAGE if after else 1)
                if not page or not self._resubmit(page, now_ms, done):
                    break
                after = page[-1][0]
        return done

    def _resubmit(self, page: list[tuple[int, str, bytes, int]], now_ms: int, done: list[str]) -> bool:
        """One page of a signer's held-back batches into the soup; False once one is still early."""
        for _, digest, payload, received_ms in page:
            try:
                self.soup.submit(payload, now_ms=now_ms, received_ms=received_ms)
            except RateLimited:
                return False
            except (BatchError, AggregationError) as exc:
                self._reject("deferred", exc)
            done.append(digest)
        return True

    def _drain_deferred(self) -> None:
        """A round of held-back batches alone, for when no new message comes to carry them."""
        resubmitted = self._submit_deferred(int(time.time() * 1000))
        if resubmitted:
            self._round(int(time.time() * 1000))
            with self._state:
                self.ledger.undefer(resubmitted)
            self._merge()

    def _round(self, now_ms: int) -> None:
        """One DeltaSoup round, filtered against this node's own rows and trusted peers' rows too
        (a lone batch is not judged by itself alone, unless the node holds nothing trusted yet: a
        fresh, empty node can only check a lone batch's bounds and signature), then stored batch
        by batch, a few batches a turn on the lock (see `_turns`): a batch whose content the library
        refuses is rejected alone; a storage failure releases the round, so that the chunk, not
        acknowledged, comes again and is admitted again (nothing acknowledged is lost)."""
        with self._state:  # own rows, topped up with trusted peers' on a node that has written little itself
            reference = self.library.reference_vectors(REFERENCE_ROWS, min_trust=self.soup.config.trusted)
        result = self.soup.round(now_ms=now_ms, reference=reference)  # the heavy part, without the lock
        try:
            for turn in _turns([len(b) for b in result.batches]):
                floats = {i: self._encode_admitted(result.batches[i], result.keep[i]) for i in turn}
                with self._state:  # a few batches' transactions a turn: a search waits for one turn at most
                    for i in turn:
                        self._store(result.batches[i], result.keep[i], floats[i])
        except BaseException:
            self.soup.release(result.batches)
            raise
        self.soup.settle(result.batches)
        if now_ms - self._seen_pruned_ms > self._seen_window_ms // 2:  # the file keeps one window of hashes
            with self._state:
                self.ledger.forget_seen(now_ms - self._seen_window_ms)
            self._seen_pruned_ms = now_ms
        self.library.refit_index(self._state)  # a flood can outgrow the index's fit within one read
        why: dict[tuple[str, str], int] = {}
        for node_id, _, reason in result.rejected:
            self.metrics.rejected_experiences.labels(reason=reason.split(":")[0]).inc()
            why[node_id[:12], reason] = why.get((node_id[:12], reason), 0) + 1
        for (sender, reason), n in sorted(why.items()):
            log.info("round rejected %d experiences from %s: %s", n, sender, reason)
        self.metrics.accepted_batches.inc(len(result.batches))
        if self.on_round is not None:
            self.on_round(result)

    def _encode_admitted(self, batch: CompressedBatch, keep: np.ndarray) -> list | None:
        """With ``encode_texts``, our floats for a batch's admitted rows, encoded before its turn on the
        lock (up to 1,000 texts, seconds): the lock is taken only to see which rows need one."""
        if not self.config.encode_texts:
            return None
        try:
            return self.library.encode_admitted(batch, keep, self._state)
        except (LibraryError, BatchError):
            return None  # the library refuses the batch when it is stored, and says why

    def _store(self, batch: CompressedBatch, keep: np.ndarray, floats: list | None = None) -> None:
        """One admitted batch into the library, in its own transaction (the caller holds the lock);
        ``floats``: our encodings of its admitted rows (`_encode_admitted`)."""
        if batch.node_id in self.bans:  # the verified signer: a ban holds whatever a header claims
            self._reject(batch.node_id, Banned(batch.node_id))
            return
        try:
            ingested = self.library.ingest(batch, keep, vectors=floats, within=self.ledger.seen_by(batch))
        except (LibraryError, BatchError) as exc:
            self._reject(batch.node_id, exc)
            return
        peer = self._peer(batch.node_id)
        peer.accepted += 1
        peer.last_seen_ms = batch.timestamp_ms
        self.metrics.ingested_experiences.inc(int(np.count_nonzero(keep)))
        log.info("ingested batch %s from %s: %d of %d admitted (%d new, %d held already), %d rejected",
                 batch.hash[:12], batch.node_id[:12], int(np.count_nonzero(keep)), len(batch), len(ingested.added),
                 ingested.duplicates, ingested.rejected)

    def _merge(self) -> None:
        """Cluster what the last writes changed (the lock is held only to read and to show; see
        `Library.rebuild_merged`): searches meanwhile show new rows unmerged."""
        self._merge_queued = False  # first: a write from now on queues another merge
        self.library.rebuild_merged(self._state)
        self.library.refit_index(self._state)

    def _schedule_merge(self) -> None:
        """A merge on the ingest thread, in turn with the rounds, not awaited; one queued at a time,
        so a burst of submissions costs one re-clustering, not one each."""
        if not self._merge_queued:
            self._merge_queued = True
            self._worker.submit(self._merge).add_done_callback(_log_failure)

    def _apply_tombstone(self, msg: Message) -> None:
        try:
            tomb = decode_tombstone(msg.data)
        except TombstoneError as exc:
            self._reject(msg.headers.get(SENDER, "unknown"), exc)
            return
        deleted = self.library.apply_tombstones(list(tomb.ids), signer=tomb.node_id)  # its signer's rows only
        self.metrics.deleted.inc(len(deleted))

    def _reject(self, sender_hint: str, exc: DsoError) -> None:
        field_name = getattr(exc, "field", type(exc).__name__)
        self.metrics.rejected_batches.labels(reason=str(field_name).split(".")[0]).inc()
        peer = self._peer(sender_hint[:64])
        peer.rejected += 1
        peer.last_error = str(exc)[:200]
        log.info("rejected a message from %s: %s", sender_hint[:12], exc)

    def _peer(self, node_id: str) -> Peer:
        peer = self.peers.get(node_id)
        if peer is None:
            if len(self.peers) >= MAX_PEERS:  # sender hints are unauthenticated: bound what they can fill
                node_id = "other"
                peer = self.peers.get(node_id)
            peer = peer or self.peers.setdefault(node_id, Peer(node_id))
        return peer


def _log_failure(future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("merging the library's new rows failed", exc_info=future.exception())


def _turns(sizes: list[int], rows: int = TURN_ROWS) -> list[list[int]]:
    """Consecutive batches grouped into turns of at most ``rows`` rows (a larger batch alone):
    many small batches are stored in few turns, and no turn is longer than one full batch."""
    turns: list[list[int]] = []
    used = rows
    for i, n in enumerate(sizes):
        if used + n > rows:
            turns.append([])
            used = 0
        turns[-1].append(i)
        used += n
    return turns


def _load_encoder(spec: str | None):
    if spec is None:
        return None
    from dsonet.encoders.registry import load_encoder

    return load_encoder(spec)
