"""Replay protection outlives a restart: the hashes of stored batches are kept in the node's ledger,
in the library file, written in the transaction of the rows they guard, and a node opened on it
refuses them again."""

import asyncio
import sqlite3
import time

import numpy as np
import pytest

from dsonet.codec import default_profile, make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from dsonet.library.errors import StorageError
from dsonet.library.store.rows import RowStore
from dsonet.network.ledger import Ledger
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub, subject_for

DIM = 16
SUBJECT = subject_for("dso", "batch", "math")


def _unit(seed: int, n: int = 1) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _batch(profile, seed: int, timestamp_ms: int | None = None):
    peer = NodeIdentity.from_seed(f"peer{seed}".encode())
    exp = Experience(f"When honest case {seed}, do step {seed}.", "math")
    return make_batch([exp], _unit(seed), profile, peer, timestamp_ms)


async def _read(node: Node, hub: InProcessHub, payloads: list[bytes]) -> None:
    sender = hub.transport()
    for payload in payloads:
        await sender.publish(payload, SUBJECT)
    await hub.drained([node.durable], timeout_s=30)


def test_a_restarted_node_refuses_a_replay_of_a_batch_it_stored_before(tmp_path):
    config = NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean")

    async def main():
        hub = InProcessHub()
        first = await Node.open(config, hub.transport())
        batch = _batch(first.profile, 1)
        await first.start()
        await _read(first, hub, [batch.to_msgpack()])
        stored = len(first.library)
        await first.close()

        hub = InProcessHub()  # a fresh stream and consumer: the replay arrives as a new message
        again = await Node.open(config, hub.transport())
        await again.start()
        fresh = _batch(again.profile, 2)
        await _read(again, hub, [batch.to_msgpack(), fresh.to_msgpack()])
        refused, rows = dict(again.soup.submit_rejections), len(again.library)
        await again.close()
        return stored, refused, rows

    stored, refused, rows = asyncio.run(main())
    assert stored == 1
    assert refused == {"hash": 1}  # the replay; the fresh batch was admitted
    assert rows == 2


def test_a_batch_hash_is_recorded_only_with_its_rows(tmp_path, monkeypatch):
    with Library(tmp_path / "lib.sqlite", encoder=None, profile=_profile()) as lib:
        ledger, batch = Ledger(lib.db), _batch(lib.profile, 1)

        def full(self):
            raise sqlite3.OperationalError("database or disk is full")

        with monkeypatch.context() as m:
            m.setattr(RowStore, "_evict_over_capacity", full)
            with pytest.raises(StorageError):
                lib.ingest(batch, within=ledger.seen_by(batch))
        assert ledger.seen(0) == {}  # rolled back with the rows: a redelivery is admitted
        lib.ingest(batch, within=ledger.seen_by(batch))
        assert ledger.seen(0) == {batch.hash: batch.timestamp_ms}


def test_hashes_older_than_the_freshness_window_are_forgotten(tmp_path):
    now = int(time.time() * 1000)
    with Library(tmp_path / "lib.sqlite", encoder=None, profile=_profile()) as lib:
        ledger, old, new = Ledger(lib.db), _batch(lib.profile, 1, now - 3_600_000), _batch(lib.profile, 2, now)
        lib.ingest(old, within=ledger.seen_by(old))
        lib.ingest(new, within=ledger.seen_by(new))
        assert ledger.seen(now - 600_000) == {new.hash: now}
        assert ledger.seen(0) == {new.hash: now}  # deleted, not only left out: nothing older is forgotten now


def _profile():
    return default_profile(DIM, "none")
