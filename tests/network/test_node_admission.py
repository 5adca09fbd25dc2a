"""A node under volume from new keys: their rows have a budget (a new key past it is dropped and
counted, a known key deferred and admitted later), and the heavy work of ingest (encoding peers'
texts, refitting the index) runs without the lock searches take. Ordered with events, not timed."""

import asyncio
import hashlib
import threading

import numpy as np

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library.index import code_index as index_module
from dsonet.library.index.code_index import CodeIndex
from dsonet.network import ingest as ingest_module
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub, subject_for

DIM = 16
WAIT_S = 60  # a guard against a hung test only


def _units(seed: int, n: int = 1) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _batch(profile, peer, seed: int, n: int, ts: int | None = None):
    exps = [Experience(f"When case {seed}-{i} comes, do step {i}.", "math") for i in range(n)]
    return make_batch(exps, _units(seed, n), profile, peer, timestamp_ms=ts)


async def _publish(sender, batch) -> None:
    await sender.publish(batch.to_msgpack(), subject_for("dso", "batch", "math"))


async def _wait(event: threading.Event) -> None:
    assert await asyncio.get_running_loop().run_in_executor(None, event.wait, WAIT_S)


async def _budgeted_node(tmp_path, clock: list, **soup):
    """A started node on an in-process hub with the simulated ``clock``, and a transport to send with."""
    hub = InProcessHub(clock=lambda: clock[0])
    config = NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean", batch_interval_s=3600, soup=soup)
    node = await Node.open(config, hub.transport())
    await node.start()
    return hub, node, hub.transport()


def test_new_keys_past_their_row_budget_are_dropped_and_known_ones_deferred(tmp_path):
    clock = [1_750_000_000.0]

    async def main():
        hub, node, sender = await _budgeted_node(tmp_path, clock, new_key_row_limit=3, new_keys_row_limit=100,
                                                 rate_window_ms=1000)
        known, stranger = NodeIdentity.from_seed(b"rows-known"), NodeIdentity.from_seed(b"rows-new")
        now = lambda: int(clock[0] * 1000)  # noqa: E731
        await _publish(sender, _batch(node.profile, known, 0, 2, now()))
        await hub.drained([node.durable])  # admitted: the key is known now
        await _publish(sender, _batch(node.profile, known, 1, 2, now()))  # 2 + 2 rows > 3: held back
        await _publish(sender, _batch(node.profile, stranger, 2, 5, now()))  # 5 > 3 from a key never admitted
        await hub.drained([node.durable])
        held = node.ledger.count_deferred()
        dropped = node.metrics.registry.get_sample_value("dso_rejected_batches_total", {"reason": "rows"})
        clock[0] += 2.0  # the window passes; a message carries the held-back batch along
        await _publish(sender, _batch(node.profile, NodeIdentity.from_seed(b"rows-carrier"), 3, 1, now()))
        await hub.drained([node.durable])
        signers = [e.provenance.node_id for e in await node.all()]  # each batch's texts its own: an id a row
        rows = (await node.stats())["library"]["rows"]
        left = node.ledger.count_deferred()
        await node.close()
        return held, dropped, left, signers, rows, known.node_id, stranger.node_id

    held, dropped, left, signers, rows, known, stranger = asyncio.run(main())
    assert (held, dropped, left) == (1, 1.0, 0) and rows == len(signers)
    assert signers.count(known) == 4 and stranger not in signers  # nothing the known key sent was lost


class _BlockingEncoder:
    """A deterministic encoder that, once ``block`` is set, waits for ``release`` inside encode."""

    id, dim = "test:blocking", DIM

    def __init__(self):
        self.block, self.started, self.release = False, threading.Event(), threading.Event()

    def encode(self, texts, kind="document"):
        if self.block:
            self.started.set()
            assert self.release.wait(WAIT_S)
        seeds = [int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) for t in texts]
        return np.concatenate([_units(s) for s in seeds])


def test_peers_texts_are_encoded_without_holding_the_lock(tmp_path):
    async def main():
        hub = InProcessHub()
        encoder = _BlockingEncoder()
        config = NodeConfig(tmp_path, encoder="test", encode_texts=True, rule="mean", batch_interval_s=3600,
                            soup={"reencode_per_batch": 0})
        node = await Node.open(config, hub.transport(), encoder=encoder)
        await node.start()
        sender = hub.transport()
        await _publish(sender, _batch(node.profile, NodeIdentity.from_seed(b"enc-0"), 0, 3))
        await hub.drained([node.durable])
        query = encoder.encode(["When case 0-0 comes, do step 0."])[0]  # the row's float is ours
        encoder.block = True
        await _publish(sender, _batch(node.profile, NodeIdentity.from_seed(b"enc-1"), 1, 3))
        await _wait(encoder.started)  # the ingest thread is encoding the new batch's texts
        during = await node.search(vector=query, k=1, min_similarity=0.9)  # takes the lock
        still_encoding = not encoder.release.is_set()
        encoder.release.set()
        await hub.drained([node.durable])
        held = (await node.stats())["library"]["with_float_vector"]
        await node.close()
        return during, still_encoding, held

    during, still_encoding, held = asyncio.run(main())
    assert still_encoding and during[0].experience.text == "When case 0-0 comes, do step 0."
    assert held == 6  # every peer row stored with our float


def test_with_encode_texts_each_peer_text_is_encoded_once_the_rounds_check_reused(tmp_path):
    encoded = []

    class Counting(_BlockingEncoder):
        def encode(self, texts, kind="document"):
            encoded.extend(texts)
            return super().encode(texts, kind)

    async def main():
        hub = InProcessHub()
        encoder = Counting()
        config = NodeConfig(tmp_path, encoder="test", encode_texts=True, rule="mean", batch_interval_s=3600)
        node = await Node.open(config, hub.transport(), encoder=encoder)
        await node.start()
        exps = [Experience(f"When case 7-{i} comes, do step {i}.", "math") for i in range(5)]
        honest = make_batch(exps, encoder.encode([e.text for e in exps]), node.profile, NodeIdentity.from_seed(b"once"))
        encoded.clear()  # what the sender encoded is not the node's
        await _publish(hub.transport(), honest)
        await hub.drained([node.durable])
        held = (await node.stats())["library"]["with_float_vector"]
        await node.close()
        return held

    assert asyncio.run(main()) == 5  # a newcomer's rows: every one re-encoded by the check, then kept as its float
    assert sorted(encoded) == sorted(f"When case 7-{i} comes, do step {i}." for i in range(5))


def test_the_index_is_refitted_without_holding_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(index_module, "SKETCH_MIN_ROWS", 40)
    started, release = threading.Event(), threading.Event()
    fit = CodeIndex.fit

    def held_fit(self, due):
        started.set()
        assert release.wait(WAIT_S)
        return fit(self, due)

    monkeypatch.setattr(CodeIndex, "fit", held_fit)

    async def main():
        hub = InProcessHub()
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean"), hub.transport())
        await node.start()
        sender = hub.transport()
        for p in range(5):  # 50 rows: past the sketch's threshold
            await _publish(sender, _batch(node.profile, NodeIdentity.from_seed(f"refit-{p}".encode()), p, 10))
        await _wait(started)
        during = await node.search(vector=_units(0)[0], k=1, min_similarity=-1.0)  # takes the lock
        unfitted = node.library.search_index.index.sketch is None
        release.set()
        await hub.drained([node.durable])
        index = node.library.search_index.index
        sketched = (index.sketch.n, index.n)
        await node.close()
        return during, unfitted, sketched

    during, unfitted, (sketched, rows) = asyncio.run(main())
    assert during and unfitted and sketched == rows == 50


def test_a_serving_node_leaves_a_core_to_searches_and_restores_blas_after():
    import os

    from threadpoolctl import threadpool_info

    from dsonet.network.access import serving

    def blas():
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    before = blas()
    with serving() as threads:
        assert threads == max(1, (os.cpu_count() or 1) - 1) and blas() <= {threads}
    assert blas() == before


def test_a_sender_not_yet_trusted_holds_at_most_its_share_of_the_deferred_queue(tmp_path, monkeypatch):

    clock = [1_750_000_000.0]

    async def main():
        hub, node, sender = await _budgeted_node(tmp_path, clock, new_key_row_limit=1, new_keys_row_limit=100,
                                                 rate_window_ms=60_000)
        flooder = NodeIdentity.from_seed(b"defer-flooder")
        now = lambda: int(clock[0] * 1000)  # noqa: E731
        size = len(_batch(node.profile, flooder, 1, 1, now()).to_msgpack())
        monkeypatch.setattr(ingest_module, "DEFERRED_KEY_BYTES", 2 * size + size // 2)  # two batches' bytes
        await _publish(sender, _batch(node.profile, flooder, 0, 1, now()))
        await hub.drained([node.durable])  # admitted once: known, not yet trusted
        for seed in range(1, 6):  # each over its row budget: held back, until its share is full
            await _publish(sender, _batch(node.profile, flooder, seed, 1, now()))
        await hub.drained([node.durable])
        held = node.ledger.count_deferred(flooder.node_id)
        dropped = node.metrics.registry.get_sample_value("dso_rejected_batches_total", {"reason": "rows"})
        await node.close()
        return held, dropped

    held, dropped = asyncio.run(main())
    assert (held, dropped) == (2, 3.0)
