"""The node service: identity, library, DeltaSoup and a transport, driven by one asyncio loop.

    node = await Node.open(NodeConfig(data_dir), transport)   # transport: in-process or NATS
    await node.start()                                        # read the stream, publish on schedule
    exp = await node.submit("When X, do Y", domain="math")    # stored now, published later
    hits = await node.search("how do I ...")
    await node.close()                                        # flushes what is pending

The node is built of rooms, one for each way data flows through it:

    ingest   `dsonet.network.ingest`   a chunk of the stream → verify → judge a round → store →
                                       merge (tombstones and batches held back included)
    publish  `dsonet.network.publish`  stored experiences → sign → send → acknowledged (the outbox)
    ledger   `dsonet.network.ledger`   what those two keep in the library file: batches held
                                       back, the outbox, the hashes of stored batches
    node     this module               lifecycle, threads and the agent's and operator's calls

Threads (see `dsonet.network.access`): DeltaSoup and ingest run on one worker thread, in
stream order; agents' calls (search, reads, submissions, publishing) run on a small pool of
reader threads. Both hold the library's `FairLock` for each library call, and ingest holds it
for one turn of at most `TURN_ROWS` rows, so a search waits for at most one turn, never for a
whole round, and never sees half a batch. Encoding never runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from dsonet.aggregate import DeltaSoup, DeltaSoupConfig, RoundResult
from dsonet.codec import Profile, default_profile, profile_of
from dsonet.encoders.registry import load_encoder
from dsonet.errors import DsoError
from dsonet.experience import Experience, Provenance, check_lesson
from dsonet.identity import NodeIdentity
from dsonet.library import Hit, Hits, Library, MergeRule
from dsonet.library.contract import record_on_members
from dsonet.library.errors import DamagedFile
from dsonet.library.store.file import damaged
from dsonet.library.store.quarantine import row_damage
from dsonet.library.policy import MAX_TOKENS, K
from dsonet.library.retrievals import OutcomeError
from dsonet.library.store.tags import checked as checked_tags
from dsonet.network.access import FairLock, SerialEncoder
from dsonet.network.ingest import Ingest, Peer
from dsonet.network.journal import Journal
from dsonet.network.ledger import Ledger
from dsonet.network.metrics import NodeMetrics
from dsonet.network.node_config import NodeConfig, NodeError
from dsonet.network.publish import Publisher, Schedule
from dsonet.network.standing import Bans, Standings, check_key
from dsonet.network.stores import Stores
from dsonet.network.transport import Message, Transport
from dsonet.scope import Scope

log = logging.getLogger(__name__)

READERS = 4  # threads answering agents' calls; library calls take turns, query encoding may overlap them


class Node:
    def __init__(self, config: NodeConfig, identity: NodeIdentity, transport: Transport, profile: Profile,
                 encoder=None):
        self.config, self.identity, self.transport, self.profile = config, identity, transport, profile
        self.encoder = None if encoder is None else SerialEncoder(encoder)  # shared by the ingest and reader threads
        self.node_id = identity.node_id
        self.durable = f"node-{self.node_id[:16]}"  # this node's reader of the stream
        self.metrics = NodeMetrics()
        self.started_ms = int(time.time() * 1000)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"node-{self.node_id[:8]}")  # ingest, in stream order
        self._readers = ThreadPoolExecutor(READERS, thread_name_prefix=f"node-{self.node_id[:8]}-read")
        self._fitter = ThreadPoolExecutor(1, thread_name_prefix=f"node-{self.node_id[:8]}-refit")  # the index's refits
        self._state = FairLock()  # held for every library call (see the module doc)
        self.library = None
        self.ledger: Ledger | None = None  # deferred batches, outbox, seen hashes: in the library's file
        self.ingest: Ingest | None = None  # the rooms, built once the library is open (`_open_state`)
        self.publisher: Publisher | None = None
        self.soup = None
        self.bans: Bans | None = None  # keys the operator banned (`dsonet.network.standing`), read at open
        self.closed = False
        self.on_round: Callable[[RoundResult], None] | None = None  # sees every DeltaSoup round (benchmarks)

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
            await node._on_worker(node._open_state)
        except DamagedFile as exc:
            node._worker.shutdown()
            node._readers.shutdown()
            node._fitter.shutdown()
            raise NodeError(f"{exc}{node._rebuild_hint()}") from None
        return node

    def _rebuild_hint(self) -> str:
        """What an empty library gets from the stream: this node's consumer resumes where it stopped, so
        only new batches come unless the consumer is deleted; its own batches it skips when reading."""
        stream = self.transport.stream
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
                               trust=self._trust, defer_merge=True, trusted=soup_config.trusted, owner=self.node_id)
        self.library.heal()  # rows damaged in the file are set aside now, not met by a search later
        self.ledger = Ledger(self.library.db)
        self.journal = Journal(self.config.data_dir / "journal.sqlite")  # rounds and reputation, for the page
        self.bans = Bans(self.library.rows)
        self.standings = Standings(self.library.rows.db, self.soup.reputation)  # reputation outlasts a restart
        stores = Stores(self.library, self.ledger, self.journal, self.metrics)
        self.ingest = Ingest(self.node_id, stores, self.soup, self.bans, lock=self._state, worker=self._worker,
                             fitter=self._fitter, encode_texts=self.config.encode_texts, on_round=self._round_done)
        c = self.config
        schedule = Schedule(c.subject_prefix, self.durable, c.batch_interval_s, c.batch_size, c.max_batch_experiences)
        self.publisher = Publisher(self.identity, self.profile, self.transport, stores, schedule, locked=self._locked,
                                   aside=self._aside)

    def _round_done(self, result: RoundResult) -> None:
        self._save_standing()
        if self.on_round is not None:
            self.on_round(result)

    @property
    def peers(self) -> dict[str, Peer]:
        """Every sender heard from (verified signers, and the header's claim for refused messages)."""
        return self.ingest.peers

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
        self.publisher.start(before_flush=lambda: self._on_worker(self.ingest.drain_deferred))

    async def close(self) -> None:
        """Graceful shutdown: publish what is pending, then close the transport and the library."""
        if self.closed:
            return
        self.closed = True
        await self.publisher.stop()
        try:
            await self.flush()
        except DsoError as exc:
            log.warning("shutdown: %s; the rest is published at the next start", exc)
        await self.transport.close()
        self._worker.shutdown(wait=True)  # what is queued there (a merge after a submit) runs first
        self._fitter.shutdown(wait=True)  # a refit in flight installs before the library closes
        await self._locked(self._close_state)
        self._readers.shutdown(wait=True)

    def _close_state(self) -> None:
        if self.library is not None:  # None where the open failed before the file was read
            self.library.close()
        self.journal.close()

    async def _on_worker(self, fn: Callable, *args, **kwargs):
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
        failed (`dsonet.library.store.quarantine`): the node serves the rest, without a traceback."""
        try:
            return fn(*args, **kwargs)
        except (sqlite3.OperationalError, ValueError) as exc:
            if not row_damage(exc) or not self.library.heal():
                raise
        except sqlite3.DatabaseError as exc:  # a broken page: one line to the caller and on /health
            if not damaged(exc):
                raise
            raise self.library.broken_page(exc) from None
        return fn(*args, **kwargs)

    async def _aside(self, fn: Callable, *args):
        """Run work that touches no shared state (encoding, signing) on a reader thread, off the loop."""
        return await asyncio.get_running_loop().run_in_executor(self._readers, fn, *args)

    async def _encode(self, texts: list[str], kind: str) -> np.ndarray:
        return await self._aside(self.encoder.encode, texts, kind)

    # ------------------------------------------------------------------ agent-facing API

    async def submit(self, text: str, domain: str = "general", confidence: float = 0.5,
                     vector: np.ndarray | list | None = None, tags: tuple[str, ...] = (),
                     scope: Scope = Scope()) -> Experience:
        """Store one experience now (encoding its text unless a vector in the profile's space is given),
        with this node's ``tags`` (`dsonet.library.store.tags`: kept here, never published) and the ``scope`` it
        holds in (`dsonet.scope`: published, signed)."""
        check_lesson(text)
        tags = checked_tags(tags)
        prov = Provenance(self.node_id, self.config.model, int(time.time() * 1000), 0)
        if vector is None:
            if self.encoder is None:
                raise NodeError("vector: this node has no encoder; send the text's vector "
                                f"({self.profile.dim} numbers in the profile's space)")
            exp = Experience(text, domain, confidence, prov, scope)  # checks the text before it is encoded
            v = (await self._encode([text], "document"))[0]
        else:
            v = self.check_vector(vector, "vector")
            exp = Experience(text, domain, confidence, prov, scope)
        await self._locked(self.library.add_vectors, [exp], v[None, :])
        if tags:
            await self._locked(self.library.tag, exp.id, tags)
        self.ingest.schedule_merge()
        self.metrics.submitted.inc()
        self.publisher.submitted()
        return exp

    async def search(self, query: str | None = None, vector: np.ndarray | list | None = None, k: int = K,
                     min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
                     domain: str | None = None, tags: tuple[str, ...] = (), environment: Scope | None = None) -> Hits:
        """The library's hits for a query (encoded here) or a vector; ``min_similarity`` None: the
        threshold calibrated for the library's space; ``tags``: only lessons carrying all of them;
        ``environment``: the asker's, lessons whose scope contradicts it held back (`dsonet.library.view.scoped`)."""
        if (query is None) == (vector is None):
            raise NodeError("query/vector: give exactly one of them")
        t = time.perf_counter()
        if vector is not None:
            q = self.check_vector(vector, "vector")
        else:
            if self.encoder is None:
                raise NodeError("query: this node has no encoder; search with a vector instead")
            q = (await self._encode([query], "query"))[0]
        hits = await self._locked(self.library.search_vector, q, k, min_similarity, domain, max_tokens, tags,
                                  environment, query)
        self.metrics.search_seconds.observe(time.perf_counter() - t)
        return hits

    async def recall(self, query: str | None = None, vector: np.ndarray | list | None = None, k: int = K,
                     min_similarity: float | None = None, max_tokens: int = MAX_TOKENS,
                     domain: str | None = None, tags: tuple[str, ...] = (),
                     environment: Scope | None = None) -> Hits:
        """`search`, with the retrieval id to report the outcome under (`outcome`) in ``hits.retrieval_id``
        (None when nothing was found), issued by the library's one registry."""
        hits = await self.search(query, vector, k, min_similarity, max_tokens, domain, tags, environment)
        hits.retrieval_id = self.library.retrievals.issue(hits)
        return hits

    async def outcome(self, retrieval_id: str, helped: bool | None = None,
                      lessons: dict[str, bool] | None = None, environment: Scope | None = None) -> int:
        """Whether the lessons of a retrieval this node issued helped, all together (``helped``) or each
        on its own (``lessons``: experience id -> helped; lessons not named get no outcome: an agent
        that tried its task without each lesson knows which one made the difference). Returns how many
        were judged. ``environment``: where the lessons were used, for a search made without one (its
        own wins): harm there moves only the signers whose lessons were meant to hold there.
        Raises `UnknownRetrieval` for an id it did not issue or whose outcome is in already."""
        try:
            judged, searched_in = self.library.retrievals.judged(retrieval_id, helped, lessons)
        except OutcomeError as exc:
            raise NodeError(str(exc)) from None
        environment = searched_in or environment
        for verdict in (True, False):
            hits = [h for h, v in judged if v is verdict]
            if hits:
                await self.record_outcome(hits, verdict, environment)
                self.metrics.outcomes.labels(helped=str(verdict).lower()).inc()
        return len(judged)

    async def record_outcome(self, hits: list[Hit], helped: bool, environment: Scope | None = None) -> None:
        """Whether the experiences of a search helped the task they were retrieved for: counted on
        every merged row (eviction by usefulness; per ``environment`` for scoped lessons) and fed to
        the reputation of each peer signer whose lesson was meant to hold there (DeltaSoup's
        feedback defence; `Library.accountable`: harm outside a lesson's scope convicts nobody).
        Reputation belongs to the ingest thread (a round updates it too), so this runs there, in
        order with the rounds."""
        await self._on_worker(self._record_outcome, hits, helped, environment)

    def _record_outcome(self, hits: list[Hit], helped: bool, environment: Scope | None = None) -> None:
        judged = []
        for hit in hits:
            with self._state:
                record_on_members(self.library, [hit], helped, environment)
                signers = self.library.accountable(hit, environment)
            judged += [s for s in signers if s != self.node_id]
        for signer in judged:
            self.soup.record_outcome(signer, helped)
        self.journal.outcome(judged, helped, self.soup.reputation.get)
        self._save_standing()

    def _save_standing(self) -> None:
        """Keep the keys' reputation in the file (on the ingest thread, which owns it)."""
        with self._state:
            self.standings.save()

    async def all(self) -> list[Experience]:
        return await self._locked(self.library.all)

    async def listing(self, domain: str | None = None, signer: str | None = None, limit: int = 50,
                      offset: int = 0) -> tuple[int, list[Experience]]:
        """`Library.listing`: a page of the lessons held, newest first, and how many match."""
        return await self._locked(self.library.listing, domain, signer, limit, offset)

    async def get(self, exp_id: str):
        return await self._locked(self.library.get, exp_id)

    async def add_evidence(self, exp_id: str, episodes: int = 1, agents: int = 0) -> Experience | None:
        """`Library.add_evidence`; the lesson, its evidence grown, waits to be published again."""
        exp = await self._locked(self.library.add_evidence, exp_id, episodes, agents)
        if exp is not None:
            self.publisher.submitted()
        return exp

    async def delete(self, exp_id: str) -> bool:
        """Delete locally and publish a signed tombstone (peers honour it for experiences we authored)."""
        removed = await self._locked(self.library.delete, exp_id)
        if removed:
            self.ingest.schedule_merge()
            self.metrics.deleted.inc()
            await self.publisher.tombstone(exp_id)
        return removed

    async def flush(self) -> int:
        """Publish every pending experience (and tombstone) now; return how many experiences were acknowledged."""
        return await self.publisher.flush()

    # ------------------------------------------------------------------ operator (`dsonet.network.admin`)

    async def keys(self) -> list[dict]:
        """Every key this node has heard from or banned: its reputation, batches accepted and
        rejected, batches held back, and whether it is banned."""
        rep, banned = self.soup.reputation, self.bans.keys
        peers = {p.node_id: p for p in list(self.peers.values())}  # one copy: the ingest thread adds peers
        names = sorted(set(peers) | banned)
        held = await self._locked(lambda: {k: self.ledger.count_deferred(k) for k in names})
        return [{"node_id": k, "reputation": round(rep.get(k), 4), "skipped": rep.skipped(k), "banned": k in banned,
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
        await self._on_worker(self.soup.reputation.forget, key)  # reputation belongs to the ingest thread
        await self._on_worker(self._save_standing)
        self.peers.pop(key, None)
        log.warning("key %s reset by the operator%s", key[:12], " (ban lifted)" if lifted else "")
        return {"node_id": key, "banned": False, "ban_lifted": lifted, "reputation": self.soup.reputation.get(key)}

    async def quarantined(self, limit: int = 1000) -> list[dict]:
        """Rows set aside as damaged (`dsonet.library.store.quarantine`)."""
        return [q.to_dict() for q in await self._locked(self.library.quarantine_list, limit)]

    async def drop_quarantined(self, seqs: list[int] | None = None) -> int:
        """Forget quarantined rows (all when ``seqs`` is None); returns how many."""
        return await self._locked(self.library.quarantine_drop, seqs)

    async def stats(self) -> dict:
        lib = await self._locked(self.library.stats)
        return {"node_id": self.node_id, "profile": self.profile.to_dict(), "library": lib,
                "pending": self.publisher.pending, "uptime_s": round(time.time() - self.started_ms / 1000, 1),
                "published_batches": int(self.metrics.registry.get_sample_value("dso_published_batches_total") or 0),
                "batch_interval_s": self.config.batch_interval_s, "batch_size": self.config.batch_size}

    def peer_list(self) -> list[dict]:
        rep = self.soup.reputation
        peers = list(self.peers.values())  # one C-level copy: the ingest thread may add peers meanwhile
        return [{**vars(p), "reputation": round(rep.get(p.node_id), 4), "skipped": rep.skipped(p.node_id)} for p in peers]

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

    # ------------------------------------------------------------------ reading

    async def _on_messages(self, chunk: list[Message]) -> None:
        await self._on_worker(self.ingest.read_chunk, chunk)


def _load_encoder(spec: str | None):
    return None if spec is None else load_encoder(spec)
