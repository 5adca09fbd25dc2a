"""Batches over their sender's rate are held back, never dropped, and admitted later in the order
they came, even in a replay of a long stream; the queue that holds them is bounded in bytes per key
and in total, and read a page at a time."""

import asyncio
import time
from contextlib import closing

import numpy as np

from dsonet.codec import default_profile, make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library.store.rows import RowStore
from dsonet.network import ingest as ingest_module
from dsonet.network.ingest import DEFERRED_PAGE
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub, subject_for

DIM = 16
T0 = 1_750_000_000.0


def _batch(profile, peer, seed: int, n: int, ts_s: float, words: int = 1):
    exps = [Experience(f"When case {seed}-{i} comes, do step {i}" + " again" * words, "math") for i in range(n)]
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return make_batch(exps, v / np.linalg.norm(v, axis=1, keepdims=True), profile, peer, timestamp_ms=int(ts_s * 1000))


async def _node(tmp_path, clock: list, hub: InProcessHub, **soup) -> Node:
    config = NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean", batch_interval_s=3600, soup=soup)
    node = await Node.open(config, hub.transport())
    await node.start()
    return node


def test_a_replay_of_a_long_stream_admits_every_acknowledged_batch_in_order_despite_a_short_rate_window(tmp_path):
    clock = [T0]
    keys = [NodeIdentity.from_seed(f"replay-{k}".encode()) for k in range(3)]

    async def main():
        hub = InProcessHub(clock=lambda: clock[0])
        sender = hub.transport()
        profile = default_profile(DIM, "none")  # the space of a node without an encoder
        published = {k.node_id: [] for k in keys}
        for step in range(30):  # 90 batches over 90 s of stream time: 10 per key in each 30 s window
            for k, key in enumerate(keys):
                batch = _batch(profile, key, 100 * k + step, 2, clock[0])
                await sender.publish(batch.to_msgpack(), subject_for("dso", "batch", "math"))
                published[key.node_id] += [e.id for e in batch.experiences]
                clock[0] += 1.0 / 3
        # a receiver taking 5 batches a key per 30 s reads the whole stream at once
        node = await _node(tmp_path / "receiver", clock, hub, rate_limit=5, rate_window_ms=30_000)
        await hub.drained([node.durable])
        held = node.ledger.count_deferred()
        for step in range(12):  # the window passes; any later message carries the held-back batches along
            if not node.ledger.count_deferred():
                break
            clock[0] += 31.0
            await sender.publish(_batch(profile, NodeIdentity.from_seed(f"carrier{step}".encode()), 1000 + step, 1,
                                        clock[0]).to_msgpack(), subject_for("dso", "batch", "math"))
            await hub.drained([node.durable])
        rate_drops = node.metrics.registry.get_sample_value("dso_rejected_batches_total", {"reason": "rate"})
        left = node.ledger.count_deferred()
        await node.close()
        with closing(RowStore(node.library.path)) as store:  # the file's rows in the order they were stored
            stored = [(r.signer, r.id) for chunk in store.index_rows() for r in chunk]
        return published, stored, held, rate_drops, left

    published, stored, held, rate_drops, left = asyncio.run(main())
    # before: 75 of the 90 batches were rejected for "rate" (their keys had no batch stored yet when
    # their sixth came) and never admitted
    assert held > 0 and rate_drops is None and left == 0
    for signer, ids in published.items():
        assert [i for s, i in stored if s == signer] == ids  # every row, in the order it was published


def test_the_deferred_queue_is_bounded_in_bytes_per_key_and_in_total_and_read_in_pages(tmp_path, monkeypatch):
    clock = [time.time()]  # now: the pass below runs at the wall clock, within the hour's window
    keys = [NodeIdentity.from_seed(f"filler-{k}".encode()) for k in range(5)]

    async def main():
        hub = InProcessHub(clock=lambda: clock[0])
        sender = hub.transport()
        node = await _node(tmp_path, clock, hub, rate_limit=1, rate_window_ms=3_600_000)
        size = len(_batch(node.profile, keys[0], 0, 40, clock[0], words=20).to_msgpack())
        # three of them a key, ten in all (raising=False: the old code, without them, ran this test too)
        monkeypatch.setattr(ingest_module, "DEFERRED_KEY_BYTES", 3 * size + size // 2)
        monkeypatch.setattr(ingest_module, "DEFERRED_BYTES", 10 * size + size // 2)
        for k, key in enumerate(keys):  # each key admitted once: known, not yet trusted
            await sender.publish(_batch(node.profile, key, 100 * k, 1, clock[0]).to_msgpack(),
                                 subject_for("dso", "batch", "math"))
        await hub.drained([node.durable])
        for seed in range(1, 21):  # then 20 full batches each, all over the rate
            for k, key in enumerate(keys):
                await sender.publish(_batch(node.profile, key, 100 * k + seed, 40, clock[0], words=20).to_msgpack(),
                                     subject_for("dso", "batch", "math"))
        await hub.drained([node.durable])
        per_key = {s: sum(len(p) for _, _, p, _ in node.ledger.deferred(s, limit=1000))
                   for s in node.ledger.deferred_signers()}
        total = sum(per_key.values())
        pages = []
        read = node.ledger.deferred

        def recorded(*args, **kwargs):
            pages.append(len(read(*args, **kwargs)))
            return read(*args, **kwargs)

        node.ledger.deferred = recorded
        await node._on_worker(node.ingest.drain_deferred)  # a pass while every key is still over its rate
        await node.close()
        return size, per_key, total, pages

    size, per_key, total, pages = asyncio.run(main())
    # before: each key held 20 payloads (counted, up to 100 a key, not weighed): 100 in all
    assert max(per_key.values()) <= 3 * size + size // 2
    assert total <= 10 * size + size // 2
    # a key's oldest batch, still early, ends its turn: one payload read a key (a page holds at most DEFERRED_PAGE)
    assert pages == [1] * len(per_key) and DEFERRED_PAGE > 1
