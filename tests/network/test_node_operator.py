"""The operator's say, through the node's API behind its token: a damaged row is quarantined, counted
on /health, listed and dropped while the node serves the rest without a traceback; a key's
standing is listed, banned and reset."""

import asyncio
import logging
import sqlite3

import httpx
import numpy as np
import pytest

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library.errors import DamagedFile
from dsonet.network.api import create_app
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub, subject_for

DIM = 16
TOKEN = "s3cret"


def _vec(seed: int, n: int | None = None) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n or 1, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v if n else v[0]


async def _served(tmp_path, hub: InProcessHub):
    node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean", batch_interval_s=3600),
                           hub.transport())
    await node.start()
    app = create_app(node, token=TOKEN, manage_node=False)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node",
                               headers={"Authorization": f"Bearer {TOKEN}"})
    return node, client


def test_a_damaged_row_is_quarantined_counted_on_health_listed_and_dropped_and_the_rest_served(tmp_path, caplog):
    texts = [f"When case {i} comes up, do step {i}." for i in range(5)]

    async def write():
        node, client = await _served(tmp_path, InProcessHub())
        ids = [(await node.submit(t, "math", vector=_vec(i))).id for i, t in enumerate(texts)]
        await client.aclose()
        await node.close()
        return ids

    async def serve():
        node, client = await _served(tmp_path, InProcessHub())
        try:
            health = (await client.get("/health")).json()
            open_listing = (await httpx.AsyncClient(transport=client._transport, base_url="http://node")
                            .get("/quarantine")).status_code
            listed = (await client.get("/quarantine")).json()
            hits = (await client.post("/search", json={"vector": _vec(0).tolist(), "min_similarity": -1.0})).json()
            held = (await client.get("/experiences")).json()["experiences"]
            dropped = (await client.delete("/quarantine", params={"seq": listed["quarantined"][0]["seq"]})).json()
            after = (await client.get("/quarantine")).json()["count"]
        finally:
            await client.aclose()
            await node.close()
        return health, open_listing, listed, hits, held, dropped, after

    ids = asyncio.run(write())
    db = sqlite3.connect(tmp_path / "library.sqlite")
    db.execute("UPDATE experiences SET signs = signs || X'00' WHERE id = ?", (ids[1],))  # one byte too many
    db.execute("UPDATE experiences SET domain = CAST(X'6d61ff68' AS TEXT) WHERE id = ?", (ids[3],))  # not UTF-8
    db.commit()
    db.close()
    with caplog.at_level(logging.INFO):
        # before: Node.open failed with "ValueError: buffer size must be a multiple of element size"
        health, open_listing, listed, hits, held, dropped, after = asyncio.run(serve())
    assert health["status"] == "ok" and health["quarantined_rows"] == 2
    assert open_listing == 401  # the operator's routes need the token
    assert listed["count"] == 2 and {q["id"] for q in listed["quarantined"]} == {ids[1], ids[3]}
    assert {h["id"] for h in hits["hits"]} == {e["id"] for e in held} == set(ids) - {ids[1], ids[3]}
    assert dropped == {"dropped": 1} and after == 1
    assert not [r for r in caplog.records if r.exc_info]  # no traceback anywhere


def test_an_operator_lists_bans_and_resets_a_key(tmp_path):
    peer = NodeIdentity.from_seed(b"operator-peer")

    async def main():
        hub = InProcessHub()
        node, client = await _served(tmp_path, hub)
        sender = hub.transport()

        async def publish(seed: int) -> list[str]:
            exps = [Experience(f"When peer case {seed}-{i} comes, do step {i}.", "math") for i in range(2)]
            batch = make_batch(exps, _vec(seed, 2), node.profile, peer)
            await sender.publish(batch.to_msgpack(), subject_for("dso", "batch", "math"))
            await hub.drained([node.durable])
            return [e.id for e in exps]

        async def visible() -> set[str]:
            found = (await client.post("/search", json={"vector": _vec(1).tolist(), "min_similarity": -1.0})).json()
            return {h["id"] for h in found["hits"]}

        try:
            first = await publish(1)
            listed = (await client.get("/keys")).json()["keys"]
            seen_before = await visible()
            banned = (await client.post(f"/keys/{peer.node_id}/ban")).json()
            refused = await publish(2)
            seen_banned = await visible()
            listed_banned = (await client.get("/keys")).json()["keys"]
            reset = (await client.post(f"/keys/{peer.node_id}/reset")).json()
            seen_reset = await visible()
            bad = await client.post("/keys/not-a-key/ban")
            banned_total = node.metrics.registry.get_sample_value("dso_rejected_batches_total", {"reason": "banned"})
            held_refused = {e.id for e in await node.all()} & set(refused)
        finally:
            await client.aclose()
            await node.close()
        return (first, listed, seen_before, banned, seen_banned, listed_banned, reset, seen_reset, bad, banned_total,
                held_refused)

    (first, listed, seen_before, banned, seen_banned, listed_banned, reset, seen_reset, bad, banned_total,
     held_refused) = asyncio.run(main())
    mine = next(k for k in listed if k["node_id"] == peer.node_id)
    assert mine["accepted"] == 1 and not mine["banned"] and mine["reputation"] > 0
    assert set(first) <= seen_before
    assert banned["banned"] is True and not set(first) & seen_banned  # hidden at once
    assert banned_total == 1.0 and not held_refused  # its next batch refused
    assert next(k for k in listed_banned if k["node_id"] == peer.node_id)["banned"] is True
    assert reset["banned"] is False and reset["ban_lifted"] is True and reset["reputation"] == 0.5
    assert set(first) <= seen_reset
    assert bad.status_code == 400 and bad.json()["detail"].startswith("key: 'not-a-key' is not a node id")


def test_a_page_damaged_while_serving_is_refused_in_one_line_and_said_on_health(tmp_path, caplog):
    """The outbox's table pointed at a page that is not a table's (what a broken page reads as): publishing
    fails in one line naming the file and the fix, /health says so, the rest is served, no traceback."""

    async def serve():
        node, client = await _served(tmp_path, InProcessHub())
        try:
            await node.submit("When case 0 comes up, do step 0.", "math", vector=_vec(0))
            db = node.library.db  # the node's own connection: its schema is read again for certain
            (index_page,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_meta_1'"
                                       ).fetchone()
            (version,) = db.execute("PRAGMA schema_version").fetchone()
            db.execute("PRAGMA writable_schema = ON")
            db.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = 'outbox'", (index_page,))
            db.execute(f"PRAGMA schema_version = {version + 1}")
            db.execute("PRAGMA writable_schema = OFF")
            with pytest.raises(DamagedFile) as flushed:  # the batch's way out reads the outbox
                await node.flush()
            health = (await client.get("/health")).json()
            listed = await client.get("/experiences")
        finally:
            await client.aclose()
            await node.close()
        return str(flushed.value), health, listed

    with caplog.at_level(logging.INFO):
        flushed, health, listed = asyncio.run(serve())
    library = tmp_path / "library.sqlite"
    assert f"{library} is damaged (" in flushed  # SQLite's own word for it follows and f"mv {library}" in flushed
    assert health["status"] == "damaged" and health["problem"] == flushed
    assert listed.status_code == 200  # what the broken page does not hold is still served
    assert not [r for r in caplog.records if r.exc_info]  # no traceback anywhere
