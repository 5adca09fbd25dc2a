"""A node under faults loses nothing acknowledged: a round that cannot be stored is released and
read again, not refused as a replay; the HTTP API says 503 (retry) when the disk fails."""

import asyncio
import sqlite3

import httpx
import numpy as np

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library.store.rows import RowStore
from dsonet.network.api import create_app
from dsonet.network.ingest import MAX_ROUND_ROWS
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub, subject_for

DIM = 16


def _unit(seed: int, n: int = 1) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _failing_disk(monkeypatch, times: int) -> list[int]:
    """The next ``times`` writes fail inside their transaction, as on a full disk."""
    calls = [0]
    real = RowStore._evict_over_capacity

    def evict(self):
        calls[0] += 1
        if calls[0] <= times:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self)

    monkeypatch.setattr(RowStore, "_evict_over_capacity", evict)
    return calls


def test_a_round_that_cannot_be_stored_is_read_again_and_nothing_is_lost(tmp_path, monkeypatch):
    async def main():
        hub = InProcessHub()
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean"), hub.transport())
        peers = [NodeIdentity.from_seed(f"peer{i}".encode()) for i in range(12)]
        calls = _failing_disk(monkeypatch, times=3)
        await node.start()
        sender = hub.transport()
        for i, peer in enumerate(peers):  # 12 honest single-row batches, read as one round
            batch = make_batch([Experience(f"When honest case {i}, do step {i}.", "math")], _unit(i), node.profile, peer)
            await sender.publish(batch.to_msgpack(), subject_for("dso", "batch", "math"))
        await hub.drained([node.durable], timeout_s=30)
        stored = len(node.library)
        await node.close()
        return stored, calls[0]

    stored, calls = asyncio.run(main())
    assert calls > 3  # the disk failed three times, then the same messages were read again
    assert stored == 12


def test_the_api_answers_503_with_a_retry_hint_when_the_disk_fails_and_stores_nothing(tmp_path, monkeypatch):
    async def main():
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM), InProcessHub().transport())
        app = create_app(node, manage_node=False)
        _failing_disk(monkeypatch, times=1)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node") as client:
            body = {"text": "When the disk is full, retry later.", "vector": _unit(1)[0].tolist()}
            failed = await client.post("/experiences", json=body)
            size = len(node.library)
            again = await client.post("/experiences", json=body)
        await node.close()
        return failed, size, again

    failed, size, again = asyncio.run(main())
    assert failed.status_code == 503 and "disk is full" in failed.json()["detail"] and "retry" in failed.json()["detail"]
    assert size == 0 and again.status_code == 201


def test_a_known_sender_over_its_rate_is_held_back_and_admitted_later_while_a_new_key_is_dropped(tmp_path):
    clock = [1_750_000_000.0]

    async def publish(sender, peer, i, profile):
        batch = make_batch([Experience(f"When case {i}, do step {i}.", "math")], _unit(i), profile, peer,
                           timestamp_ms=int(clock[0] * 1000))
        await sender.publish(batch.to_msgpack(), subject_for("dso", "batch", "math"))

    async def main():
        hub = InProcessHub(clock=lambda: clock[0])
        config = NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean", batch_interval_s=3600,
                            soup={"rate_limit": 2, "rate_window_ms": 1000})
        node = await Node.open(config, hub.transport())
        await node.start()
        sender, known, stranger = hub.transport(), NodeIdentity.from_seed(b"known"), NodeIdentity.from_seed(b"new")
        await publish(sender, known, 0, node.profile)
        await hub.drained([node.durable])  # one batch admitted: the key is known now
        for i in range(1, 5):
            await publish(sender, known, i, node.profile)  # one more fits the window, three are early
        for i in range(10, 13):
            await publish(sender, stranger, i, node.profile)  # two fit, the third is over a new key's budget
        await hub.drained([node.durable])
        held = node.ledger.count_deferred()
        for step in range(2):  # the window passes twice; any message carries the held-back batches along
            clock[0] += 2.0
            await publish(sender, NodeIdentity.from_seed(f"carrier{step}".encode()), 100 + step, node.profile)
            await hub.drained([node.durable])
        ids = {e.text for e in node.library.all()}
        await node.close()
        return held, ids

    held, texts = asyncio.run(main())
    assert held == 4
    assert {f"When case {i}, do step {i}." for i in range(5)} <= texts  # nothing the known sender sent was lost
    assert "When case 12, do step 12." in texts  # nor the new key's third batch: held, then admitted


def test_a_flood_in_one_read_is_cut_into_rounds_of_bounded_size(tmp_path):

    async def main():
        hub = InProcessHub()
        # the subject is rounds, not the newcomers' row budgets
        config = NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean", soup={"new_keys_row_limit": None})
        node = await Node.open(config, hub.transport())
        rounds = []
        node.on_round = lambda result: rounds.append(sum(len(b) for b in result.batches))
        await node.start()
        sender = hub.transport()
        for p in range(6):  # six batches of 1,000 rows from six keys, read as one chunk
            peer = NodeIdentity.from_seed(f"flood{p}".encode())
            exps = [Experience(f"When flood {p} case {i}, do step {i}.", "math") for i in range(1000)]
            batch = make_batch(exps, _unit(p, 1000), node.profile, peer)
            await sender.publish(batch.to_msgpack(), subject_for("dso", "batch", "math"))
        await hub.drained([node.durable], timeout_s=120)
        stored = len(node.library)
        await node.close()
        return rounds, stored

    rounds, stored = asyncio.run(main())
    assert len(rounds) >= 2 and max(rounds) <= MAX_ROUND_ROWS and sum(rounds) == 6000 and stored == 6000


def test_a_delete_while_the_stream_is_down_is_kept_and_replicates_once_it_is_back(tmp_path):
    from dsonet.network.transport import InProcessTransport, TransportError

    class Flaky(InProcessTransport):
        down = False

        async def publish(self, payload, subject, headers=None):
            if self.down:
                raise TransportError("no NATS server reachable")
            return await super().publish(payload, subject, headers)

    async def main():
        hub = InProcessHub()
        flaky = Flaky(hub)
        a = await Node.open(NodeConfig(tmp_path / "a", encoder=None, dim=DIM, rule="mean"), flaky)
        b = await Node.open(NodeConfig(tmp_path / "b", encoder=None, dim=DIM, rule="mean"), hub.transport())
        for node in (a, b):
            await node.start()
        exp = await a.submit("When the stream is down, keep the delete.", "math", vector=_unit(3)[0])
        await a.flush()
        await hub.drained([b.durable])
        held_before = await b.get(exp.id) is not None
        flaky.down = True
        deleted = await a.delete(exp.id)
        await hub.drained([b.durable])
        held_during = await b.get(exp.id) is not None
        flaky.down = False
        await a.flush()
        await hub.drained([b.durable])
        held_after = await b.get(exp.id) is not None
        for node in (a, b):
            await node.close()
        return held_before, deleted, held_during, held_after

    assert asyncio.run(main()) == (True, True, True, False)
