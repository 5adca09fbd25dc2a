"""The ingest room: what a node receives, from the stream's chunk to the merged view a search reads.

    chunk of messages ─ verify (DeltaSoup's gate) ─ round (judge beside trusted rows) ─ store a few
    batches a turn (the library, its hash in the ledger) ─ merge the new rows once the reader's backlog
    is read ─ refit the index, once a chunk

The round decodes each row once and encodes each text once: a batch goes to the library as one value
(`dsonet.library.Admitted`), its admitted rows with their ê, which the merge clusters by
(`dsonet.library.view.decoded`), and with `encode_texts` our encodings of their texts, the round's
re-encodings where it made them. Rows a trusted key got in on a re-encoding sample's word
are marked in the ledger; when a later sample catches the key lying, they are set aside
(`_set_aside_sampled`) before the next round.

Every step runs on the node's ingest thread, in stream order (`Node._on_worker`); the library's
lock (`dsonet.network.access.FairLock`) is taken for each library call only, and for at most one
turn of `TURN_ROWS` rows while storing, so a search waits for one turn, never for a round.

A tombstone first closes the round so far (so it can find what it deletes), then applies. A batch
over its sender's rate is not dropped but held back in the ledger (`dsonet.network.ledger`) and
submitted again with later rounds, in the order it came, within byte shares (`defer_or_reject`).
Freshness is judged against the time the stream stored the message, so a node replaying old
history does not reject it as stale while a fresh replay of an old batch still is.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from collections import OrderedDict
from concurrent.futures import Executor, Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dsonet.aggregate import AggregationError, DeltaSoup, RateLimited, RoundResult
from dsonet.codec.batch import MAX_EXPERIENCES
from dsonet.errors import BatchError, DsoError
from dsonet.library import Admitted, Library, LibraryError
from dsonet.library.store.quarantine import row_damage
from dsonet.network.access import FairLock
from dsonet.network.standing import Banned, Bans
from dsonet.network.stores import Stores
from dsonet.network.tombstone import TombstoneError, decode_tombstone
from dsonet.network.transport import SENDER, Message, parse_subject

log = logging.getLogger(__name__)

TOMBSTONE = "tombstone"
MAX_PEERS = 1024
REFUSED_REMEMBERED = 4096  # refused messages whose count is kept (oldest forgotten first)
HANDLED_REMEMBERED = 16_384  # stream messages known as read through (oldest forgotten first): about 3 MB
REFERENCE_ROWS = 256  # trusted rows (own, then trusted peers') added to every round's pool (see `round`)
MAX_ROUND_ROWS = 4096  # a round closes early once this many rows wait
# Batches held back from senders over their rate, in the ledger (see `defer_or_reject`), in bytes:
# weighed, not counted: 500 payloads of 1.49 MB from 5 keys would take 745 MB.
# An honest batch of 10 rows at d = 7680 is ~15 KB, so a share holds thousands of them.
DEFERRED_BYTES = 256 * 2**20  # the whole queue; a trusted key may hold up to all of it
DEFERRED_KEY_BYTES = 32 * 2**20  # one key admitted before, not yet trusted
DEFERRED_NEW_KEYS_BYTES = 32 * 2**20  # all keys never admitted, together: Sybil keys share one share
NEW_KEYS = "(new keys)"  # the share those count against
DEFERRED_PAGE = 8  # payloads read at a time (at most 8 × 4 MiB): the queue is never read whole
# Rows stored unmerged while a reader's backlog is read (searches show them unmerged meanwhile):
# past this, a merge runs before the backlog is through.
MERGE_BACKLOG_ROWS = 20_000
TURN_ROWS = MAX_EXPERIENCES  # rows stored per turn on the library's lock: a search waits for at most this many


@dataclass
class Peer:
    node_id: str
    accepted: int = 0
    rejected: int = 0
    last_seen_ms: int = 0
    last_error: str = ""


class Ingest:
    """A node's receiving side; every method runs on the node's ingest thread (``worker``)."""

    def __init__(self, node_id: str, stores: Stores, soup: DeltaSoup, bans: Bans, *, lock: FairLock,
                 worker: Executor, fitter: Executor, encode_texts: bool, on_round: Callable[[RoundResult], None]):
        """``lock``: the library's, taken for each library call (see the module doc); ``worker``: the
        ingest thread, where a merge is queued; ``fitter``: one thread where the index is refitted
        while the ingest thread goes on (`refit_index` needs no lock but to look and install);
        ``encode_texts``: our floats for peers' texts too (`NodeConfig.encode_texts`); ``on_round``:
        sees every round once it is stored."""
        self.node_id, self.soup, self.bans = node_id, soup, bans
        self.library, self.ledger = stores.library, stores.ledger
        self.journal, self.metrics = stores.journal, stores.metrics
        self.state, self.worker, self.fitter = lock, worker, fitter
        self._fitting: Future | None = None  # the refit started after a chunk, while it runs
        self.encode_texts, self.on_round = encode_texts, on_round
        self.peers: dict[str, Peer] = {}
        # messages already counted as refused: a chunk read again before it went through (after a heal, or
        # redelivered after its handler failed) refuses them again, and a peer's count is of batches, not of
        # deliveries; a chunk that went through is skipped whole when it comes again (`_handled`)
        self._refused: OrderedDict[bytes, None] = OrderedDict()
        # stream messages this reader has read through, by (seq, stored time): the stream delivers one again
        # when its ack came late or was lost, or when a consumer is made again; read again, a batch stored
        # the first time would be refused as a replay and counted against its honest sender (it failed the
        # demo's two-node test). A stream made again restarts its seqs, but not its clock
        self._handled: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._merge_queued = False
        self._unmerged_rows = 0  # stored since the last merge, while a backlog was read
        # replay protection outlives a restart: the batches stored within the freshness window (with
        # the gate's margin for clock skew) are refused again; older ones are stale anyway
        self._seen_pruned_ms = int(time.time() * 1000)  # when the ledger last forgot hashes (stream time)
        self.soup.remember(self.ledger.seen(self._seen_pruned_ms - self._seen_window_ms))

    @property
    def _seen_window_ms(self) -> int:
        return 2 * self.soup.config.t_max_ms

    # ------------------------------------------------------------------ a chunk of the stream

    def read_chunk(self, chunk: list[Message]) -> None:
        fresh = [m for m in chunk if (m.seq, m.timestamp_ms) not in self._handled]
        if len(fresh) < len(chunk):
            log.debug("%d of %d messages delivered again, read through already: skipped",
                      len(chunk) - len(fresh), len(chunk))
        if not fresh:
            return
        try:
            self._handle_chunk(fresh)
        except (sqlite3.OperationalError, ValueError) as exc:  # a damaged row read while judging a round
            with self.state:
                if not row_damage(exc) or not self.library.heal():
                    raise
            self._handle_chunk(fresh)
        for m in fresh:  # only once the whole chunk went through: a chunk that failed comes again, unacked
            self._handled[m.seq, m.timestamp_ms] = None
        while len(self._handled) > HANDLED_REMEMBERED:
            self._handled.popitem(last=False)

    def _handle_chunk(self, chunk: list[Message]) -> None:
        """Verify every batch into the soup; a tombstone first closes the round so far (so it can
        find what it deletes), then applies. Batches held back from senders over their rate go
        first, into the same round."""
        last_ms = chunk[-1].timestamp_ms
        resubmitted = self._submit_deferred(last_ms)
        for msg in chunk:
            if msg.headers.get(SENDER) == self.node_id:
                continue  # our own message: its experiences are in the library already
            self.metrics.received.inc()
            if msg.headers.get(SENDER, "") in self.bans:  # a header naming a banned key drops only its own message
                self._reject(msg.headers[SENDER], Banned(msg.headers[SENDER]), msg.data)
                continue
            subject = parse_subject(msg.subject)
            if subject is not None and subject.kind == TOMBSTONE:
                self.round(msg.timestamp_ms)
                with self.state:
                    self._apply_tombstone(msg)
                continue
            if self.soup.queued_rows > MAX_ROUND_ROWS - MAX_EXPERIENCES:
                self.round(msg.timestamp_ms)  # a round's decompressed rows stay within ~125 MB at d = 7680
            try:
                self.soup.submit(msg.data, now_ms=msg.timestamp_ms)
            except RateLimited as exc:
                self._defer_or_reject(msg, exc)
            except (BatchError, AggregationError) as exc:
                self._reject(msg.headers.get(SENDER, "unknown"), exc, msg.data)
        self.round(last_ms)
        with self.state:
            self.ledger.undefer(resubmitted)  # only once their round is stored
        if chunk[-1].pending == 0 or self._unmerged_rows >= MERGE_BACKLOG_ROWS:
            self.merge()  # a backlog is merged once it is read: each merge reclusters its domains whole
        elif self._fitting is None or self._fitting.done():
            # the merge refits too; without one, a flood could outgrow the index's fit within one read.
            # The fit (about a second at d = 7680) runs beside the next chunk's verify and store: with the
            # ingest thread waiting for it, the round over 100 x 100 x 7680 took 3.28 s, beside it 2.94 s
            self._fitting = self.fitter.submit(refit_index, self.library, self.state)
            self._fitting.add_done_callback(_log_failure)

    # ------------------------------------------------------------------ batches held back

    def _defer_or_reject(self, msg: Message, exc: RateLimited) -> None:
        """A batch over its sender's rate is held back, not dropped (a replay's backlog is no attack):
        it waits in the ledger and is submitted again with later rounds, in the order it came
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
        with self.state:
            room = (self.ledger.deferred_bytes() + size <= DEFERRED_BYTES
                    and self.ledger.deferred_bytes(share) + size <= cap)
            if room:
                self.ledger.defer(msg.data, msg.timestamp_ms, signer, share)
        if room:
            self.metrics.deferred_batches.inc()
            return
        self._reject(signer, exc, msg.data)

    def _submit_deferred(self, now_ms: int) -> list[str]:
        """Submit the held-back batches again (fresh as of when they were received), each signer's in
        the order they came, a page at a time; a signer's turn ends at its first batch still over
        its rate (the later ones would be too, and must not overtake it), and the pass ends once the
        round is full. Returns the digests that left the queue, admitted or refused for good."""
        done: list[str] = []
        with self.state:
            signers = self.ledger.deferred_signers()
        for signer in signers:
            after = 0
            while self.soup.queued_rows <= MAX_ROUND_ROWS - MAX_EXPERIENCES:
                with self.state:  # its oldest alone first: while that is still early, one payload is read
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
                self._reject("deferred", exc, payload)
            done.append(digest)
        return True

    def drain_deferred(self) -> None:
        """A round of held-back batches alone, for when no new message comes to carry them; and the
        merge a backlog still owes, should the stream have promised messages that never came."""
        resubmitted = self._submit_deferred(int(time.time() * 1000))
        if resubmitted:
            self.round(int(time.time() * 1000))
            with self.state:
                self.ledger.undefer(resubmitted)
        if resubmitted or self._unmerged_rows:
            self.merge()

    # ------------------------------------------------------------------ a round

    def round(self, now_ms: int) -> None:
        """One DeltaSoup round, filtered against this node's own rows and trusted peers' rows too
        (a lone batch is not judged by itself alone, unless the node holds nothing trusted yet: a
        fresh, empty node can only check a lone batch's bounds and signature), then stored batch
        by batch, a few batches a turn on the lock (see `_turns`): a batch whose content the library
        refuses is rejected alone; a storage failure releases the round, so that the chunk, not
        acknowledged, comes again and is admitted again (nothing acknowledged is lost)."""
        with self.state:  # own rows, topped up with trusted peers' on a node that has written little itself
            reference = self.library.reference_vectors(REFERENCE_ROWS, min_trust=self.soup.config.trusted)
        # the heavy part, without the lock
        result = self.soup.round(now_ms=now_ms, reference=reference, encodings=self.encode_texts)
        try:
            for turn in _turns([len(b) for b in result.batches]):
                admitted = [self._admitted(result, i) for i in turn]  # encoded before the turn on the lock
                with self.state:  # a few batches' transactions a turn: a search waits for one turn at most
                    for one in admitted:
                        self._store(one)
        except BaseException:
            self.soup.release(result.batches)
            raise
        self.soup.settle(result.batches)
        for key in result.caught:  # after storing: this round's unchecked rows of the key go too
            self._set_aside_sampled(key)
        if now_ms - self._seen_pruned_ms > self._seen_window_ms // 2:  # the ledger keeps one window of hashes
            with self.state:
                self.ledger.forget_seen(now_ms - self._seen_window_ms)
            self._seen_pruned_ms = now_ms
        why: dict[tuple[str, str], int] = {}
        for node_id, _, reason in result.rejected:
            self.metrics.rejected_experiences.labels(reason=reason.split(":")[0]).inc()
            why[node_id[:12], reason] = why.get((node_id[:12], reason), 0) + 1
        for (sender, reason), n in sorted(why.items()):
            log.info("round rejected %d experiences from %s: %s", n, sender, reason)
        self.metrics.accepted_batches.inc(len(result.batches))
        self.journal.round(result, now_ms, self.soup.reputation.get)
        self.on_round(result)

    def _admitted(self, result: RoundResult, i: int) -> Admitted:
        """Batch ``i`` of a round as the library stores it; with ``encode_texts``, our encodings of its
        admitted texts: the round's for the rows it re-encoded, the rest encoded here, before the
        batch's turn on the lock (up to 1,000 texts, seconds)."""
        batch, keep = result.batches[i], result.keep[i]
        verified = None if result.verified is None else result.verified[i]
        encodings = None
        if self.encode_texts:  # the soup reads batches in the library's profile only
            rows = np.flatnonzero(keep)
            encodings = np.empty((len(rows), batch.profile.dim), np.float32)
            done = np.zeros(len(rows), bool) if result.encodings is None else verified[rows]
            if done.any():  # the round's encodings cover every verified row, admitted or not
                encodings[done] = result.encodings[i][keep[np.flatnonzero(verified)]]
            if not done.all():
                encodings[~done] = self.library.encoder.encode([batch.experiences[j].text for j in rows[~done]],
                                                               kind="document")
        return Admitted(batch, keep, result.vectors[i][keep], verified, encodings)

    def _store(self, admitted: Admitted) -> None:
        """One admitted batch into the library, in its own transaction with its hash in the ledger
        (the caller holds the lock), with the ids of its rows stored on a re-encoding sample's word
        only (`Admitted.sampled`)."""
        batch, kept = admitted.batch, int(np.count_nonzero(admitted.keep))
        if batch.node_id in self.bans:  # the verified signer: a ban holds whatever a header claims
            self._reject(batch.node_id, Banned(batch.node_id))
            return
        try:
            ingested = self.library.ingest(admitted, within=self.ledger.seen_by(batch, admitted.sampled))
        except (LibraryError, BatchError) as exc:
            self._reject(batch.node_id, exc)
            return
        self.journal.stored(batch.node_id, len(ingested.added), ingested.duplicates)
        self._unmerged_rows += len(ingested.added)
        peer = self._peer(batch.node_id)
        peer.accepted += 1
        peer.last_seen_ms = batch.timestamp_ms
        self.metrics.ingested_experiences.inc(kept)
        log.info("ingested batch %s from %s: %d of %d admitted (%d new, %d held already), %d rejected",
                 batch.hash[:12], batch.node_id[:12], kept, len(batch), len(ingested.added),
                 ingested.duplicates, ingested.rejected)

    def _set_aside_sampled(self, key: str) -> None:
        """A re-encoding sample caught ``key`` lying: every row of it stored on a sample's word only,
        in earlier rounds and this one, is quarantined (`Library.set_aside`: the operator lists and
        drops them, `dso node quarantine`), with one log line; rows whose text was checked stay.
        Its reputation fell already (`Reputation.caught`), so from now on every row it sends is checked."""
        with self.state:
            ids = self.ledger.sampled(key)  # none for a key untrusted so far: every row of it was checked
            if not ids:
                return
            seqs = self.library.set_aside([(i, key) for i in ids], f"its signer {key[:12]}… failed a re-encoding "
                                          "sample; stored while only sampled")
            self.ledger.forget_sampled(key)
        self.metrics.set_aside.inc(len(seqs))
        log.warning("set aside %d rows of %s stored while only sampled: a re-encoding sample caught it lying "
                    "(list: dso node quarantine)", len(seqs), key[:12])

    # ------------------------------------------------------------------ the merged view

    def merge(self) -> None:
        """Cluster what the last writes changed, then refit the index where it is due (`rebuild_merged`,
        `refit_index`): searches meanwhile show new rows unmerged."""
        self._merge_queued = False  # first: a write from now on queues another merge
        self._unmerged_rows = 0
        # the clustering and the fit read the same settled rows and install apart, each under the lock
        # for a moment: on two cores they run side by side (numpy leaves the GIL for the heavy parts).
        # On the fitter, the fit waits for one still running from a chunk, and finds nothing due if that
        # one covered these rows
        fitting = self.fitter.submit(refit_index, self.library, self.state)
        rebuild_merged(self.library, self.state)
        fitting.result()

    def schedule_merge(self) -> None:
        """A merge on the ingest thread, in turn with the rounds, not awaited; one queued at a time,
        so a burst of submissions costs one re-clustering, not one each."""
        if not self._merge_queued:
            self._merge_queued = True
            self.worker.submit(self.merge).add_done_callback(_log_failure)

    # ------------------------------------------------------------------ tombstones and peers

    def _apply_tombstone(self, msg: Message) -> None:
        try:
            tomb = decode_tombstone(msg.data)
        except TombstoneError as exc:
            self._reject(msg.headers.get(SENDER, "unknown"), exc, msg.data)
            return
        deleted = self.library.apply_tombstones(list(tomb.ids), signer=tomb.node_id)  # its signer's rows only
        self.metrics.deleted.inc(len(deleted))

    def _reject(self, sender_hint: str, exc: DsoError, payload: bytes = b"") -> None:
        if payload:
            key = hashlib.sha256(payload).digest()
            if key in self._refused:
                return
            self._refused[key] = None
            if len(self._refused) > REFUSED_REMEMBERED:
                self._refused.popitem(last=False)
        field_name = exc.reason
        self.metrics.rejected_batches.labels(reason=field_name.split(".")[0]).inc()
        peer = self._peer(sender_hint[:64])
        peer.rejected += 1
        peer.last_error = str(exc)[:200]
        self.journal.refused(sender_hint, f"{field_name} (whole batch)")
        log.info("rejected a message from %s: %s", sender_hint[:12], exc)

    def _peer(self, node_id: str) -> Peer:
        peer = self.peers.get(node_id)
        if peer is None:
            if len(self.peers) >= MAX_PEERS:  # sender hints are unauthenticated: bound what they can fill
                node_id = "other"
                peer = self.peers.get(node_id)
            peer = peer or self.peers.setdefault(node_id, Peer(node_id))
        return peer


def rebuild_merged(library: Library, lock: AbstractContextManager) -> None:
    """Cluster the domains writes changed since the last rebuild, holding ``lock`` only to read which
    rows and to show the result: the clustering itself (seconds at tens of thousands of rows) runs
    without it, on rows present when it started (rows are only ever appended or masked)."""
    with lock:
        jobs = library.merge_jobs()
    built = library.build_merged(jobs)
    with lock:
        library.install_merged(jobs, built)


def refit_index(library: Library, lock: AbstractContextManager) -> bool:
    """Fit the index's coarse sketch and subspace stage again where the library has outgrown them,
    holding ``lock`` only to see what is due and to install the fit: the fit itself (seconds at
    d = 7680) reads only rows present when it fell due. Returns whether anything was refitted."""
    with lock:
        due = library.refit_due()
    if due is None:
        return False
    fitted = library.fit_index(due)
    with lock:
        library.install_fit(due, fitted)
    return True


def _log_failure(future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("merging the library's new rows or refitting its index failed", exc_info=future.exception())


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
