"""A reader's backlog: each message says how many follow it, and a node merges a backlog once it
is read (each merge reclusters its domains whole), or sooner when it has stored enough unmerged."""

import asyncio
import threading
import time

import numpy as np
import pytest

from dsonet.codec import make_batch
from dsonet.codec.batch import default_profile
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.library.index import code_index
from dsonet.network import ingest as ingest_module
from dsonet.network import transport as transport_module
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import SENDER, InProcessHub, Message, subject_for

DIM, BATCHES, ROWS = 16, 5, 3
PROFILE = default_profile(DIM, "test:backlog")


def _payloads() -> list[tuple[bytes, str]]:
    rng = np.random.default_rng(0)
    out = []
    for b in range(BATCHES):
        signer = NodeIdentity.from_seed(f"backlog-{b}".encode())
        exps = [Experience(f"When step {b} meets case {r}, check the unit first.", "math", 0.7,
                           Provenance(signer.node_id, "m", 0, 0)) for r in range(ROWS)]
        v = rng.standard_normal((ROWS, DIM)).astype(np.float32)
        out.append((make_batch(exps, v / np.linalg.norm(v, axis=1, keepdims=True), PROFILE, signer).to_msgpack(),
                    signer.node_id))
    return out


def test_the_in_process_reader_hands_each_message_its_backlog(monkeypatch):
    monkeypatch.setattr(transport_module, "CHUNK", 2)

    async def main() -> list[list[int]]:
        hub, seen = InProcessHub(), []

        async def handler(chunk):
            seen.append([m.pending for m in chunk])

        for i in range(5):
            await hub.transport().publish(b"x%d" % i, "dso.batch.math", {})
        await hub.transport().subscribe("reader", handler)
        await hub.drained(["reader"])
        return seen

    assert asyncio.run(main()) == [[4, 3], [2, 1], [0]]


@pytest.mark.parametrize("backlog_rows, merges", [(ingest_module.MERGE_BACKLOG_ROWS, 1), (ROWS, 3)])
def test_a_node_merges_a_backlog_once_it_is_read_or_when_enough_is_unmerged(tmp_path, monkeypatch, backlog_rows,
                                                                            merges):
    monkeypatch.setattr(transport_module, "CHUNK", 2)  # five batches: three chunks
    monkeypatch.setattr(ingest_module, "MERGE_BACKLOG_ROWS", backlog_rows)

    async def main() -> tuple[int, dict]:
        hub = InProcessHub()
        config = NodeConfig(tmp_path, encoder=None, dim=DIM, encoder_id=PROFILE.encoder_id, rule="mean",
                            batch_interval_s=3600)
        node = await Node.open(config, hub.transport(), NodeIdentity.from_seed(b"backlog-reader"), profile=PROFILE)
        ran, merge = [], node.ingest.merge
        node.ingest.merge = lambda: (ran.append(1), merge())[1]
        for payload, signer in _payloads():
            await hub.transport().publish(payload, subject_for("dso", "batch", "math"), {SENDER: signer})
        try:
            await node.start()
            await hub.drained([node.durable])
            return len(ran), (await node.stats())["library"]
        finally:
            await node.close()

    ran, held = asyncio.run(main())
    assert ran == merges
    assert held["rows"] == BATCHES * ROWS and held["clusters"] == BATCHES * ROWS  # every row merged, none lost


def test_a_backlog_the_stream_promised_but_never_sent_is_merged_at_the_next_drain(tmp_path):
    """The publisher's schedule drains held-back batches before each flush: a merge still owed runs then,
    so rows stay unmerged for one batch interval at most, whatever a stream's pending count said."""
    async def main() -> tuple[list[int], dict]:
        config = NodeConfig(tmp_path, encoder=None, dim=DIM, encoder_id=PROFILE.encoder_id, rule="mean",
                            batch_interval_s=3600)
        node = await Node.open(config, InProcessHub().transport(), NodeIdentity.from_seed(b"backlog-reader"),
                               profile=PROFILE)
        ran, merge = [], node.ingest.merge
        node.ingest.merge = lambda: (ran.append(1), merge())[1]
        now = int(time.time() * 1000)
        chunk = [Message(p, subject_for("dso", "batch", "math"), i + 1, now, {SENDER: s}, pending=10)
                 for i, (p, s) in enumerate(_payloads()[:2])]
        try:
            node.ingest.read_chunk(chunk)
            before = len(ran)
            node.ingest.drain_deferred()
            return [before, len(ran)], (await node.stats())["library"]
        finally:
            await node.close()

    ran, held = asyncio.run(main())
    assert ran == [0, 1]  # none while more was said to follow; one at the drain
    assert held["rows"] == 2 * ROWS and held["clusters"] == 2 * ROWS


def test_a_refused_batch_read_again_counts_once_against_its_sender(tmp_path):
    """A chunk comes again when the stream redelivers it or after a heal: the refusal stands, the count is of
    batches, not deliveries (a forged batch counted twice once failed the demo's two-node test)."""
    async def main() -> tuple[int, int]:
        config = NodeConfig(tmp_path, encoder=None, dim=DIM, encoder_id=PROFILE.encoder_id, rule="mean",
                            batch_interval_s=3600)
        node = await Node.open(config, InProcessHub().transport(), NodeIdentity.from_seed(b"refusing-reader"),
                               profile=PROFILE)
        payload, signer = _payloads()[0]
        forged = payload[:-8] + bytes(8)  # its signature no longer verifies
        chunk = [Message(forged, subject_for("dso", "batch", "math"), 1, int(time.time() * 1000), {SENDER: signer})]
        try:
            node.ingest.read_chunk(chunk)
            node.ingest.read_chunk(chunk)
            peer = node.ingest.peers[signer[:64]]
            return peer.rejected, (await node.stats())["library"]["rows"]
        finally:
            await node.close()

    rejected, rows = asyncio.run(main())
    assert (rejected, rows) == (1, 0)


@pytest.mark.parametrize("second_seq, counts", [(1, (1, 0)), (2, (1, 1))])
def test_a_stored_batch_delivered_again_is_no_replay_but_published_again_is(tmp_path, second_seq, counts):
    """The stream delivers a message again (same seq, same stored time) when its ack came late or a consumer
    was made again: it was read through, so it is skipped, not refused as a replay against its honest sender
    (that once failed the demo's two-node test). The same bytes published again are a new message: a replay."""
    async def main() -> tuple[tuple[int, int], int]:
        config = NodeConfig(tmp_path, encoder=None, dim=DIM, encoder_id=PROFILE.encoder_id, rule="mean",
                            batch_interval_s=3600)
        node = await Node.open(config, InProcessHub().transport(), NodeIdentity.from_seed(b"reading-again"),
                               profile=PROFILE)
        (payload, signer), now = _payloads()[0], int(time.time() * 1000)
        try:
            for seq in (1, second_seq):
                node.ingest.read_chunk([Message(payload, subject_for("dso", "batch", "math"), seq, now,
                                                {SENDER: signer})])
            peer = node.ingest.peers[signer[:64]]
            return (peer.accepted, peer.rejected), (await node.stats())["library"]["rows"]
        finally:
            await node.close()

    assert asyncio.run(main()) == (counts, ROWS)


def test_the_ingest_thread_reads_on_while_the_index_is_refitted(tmp_path, monkeypatch):
    """A chunk that leaves the index due for a refit hands the fit to the fitter thread: the next chunk is
    read meanwhile (on two cores the node's round took a tenth longer while it waited), no second fit is
    queued while one runs, and the fit, once installed, covers every row stored meanwhile."""
    monkeypatch.setattr(code_index, "SKETCH_MIN_ROWS", 2 * ROWS)  # due after the first chunk
    started, release, fits = threading.Event(), threading.Event(), []
    fit = code_index.CodeIndex.fit

    def held_fit(self, due):
        fits.append(due.rows)
        started.set()
        assert release.wait(60)
        return fit(self, due)

    monkeypatch.setattr(code_index.CodeIndex, "fit", held_fit)

    async def main() -> tuple[bool, int, tuple[int, int]]:
        config = NodeConfig(tmp_path, encoder=None, dim=DIM, encoder_id=PROFILE.encoder_id, rule="mean",
                            batch_interval_s=3600)
        node = await Node.open(config, InProcessHub().transport(), NodeIdentity.from_seed(b"backlog-reader"),
                               profile=PROFILE)
        now, payloads = int(time.time() * 1000), _payloads()
        chunks = [[Message(p, subject_for("dso", "batch", "math"), i + 1, now, {SENDER: s}, pending=10)
                   for i, (p, s) in enumerate(payloads[a:b], a)] for a, b in ((0, 2), (2, 4))]
        try:
            reader = threading.Thread(target=lambda: [node.ingest.read_chunk(c) for c in chunks])
            reader.start()
            assert started.wait(60)
            reader.join(30)  # both chunks read while the first fit is held
            read_on = not reader.is_alive()
            rows = (await node.stats())["library"]["rows"]
            release.set()
            node.ingest.fitter.submit(lambda: None).result(60)  # the fit installed
            index = node.library.search_index.index
            return read_on, rows, (index.sketch.n, index.n)
        finally:
            release.set()
            await node.close()

    read_on, rows, (sketched, held) = asyncio.run(main())
    assert read_on and rows == 4 * ROWS
    assert fits == [2 * ROWS]  # one fit, on the rows present when it fell due
    assert sketched == held == 4 * ROWS  # the rows stored meanwhile sketched as it installed
