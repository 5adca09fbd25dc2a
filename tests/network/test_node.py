"""Nodes on the in-process transport: the node service and its HTTP API, no server needed."""

import asyncio

import httpx
import numpy as np
import pytest

from dsonet.identity import NodeIdentity
from dsonet.network.api import create_app
from dsonet.network.node import Node, NodeConfig, NodeError
from dsonet.network.transport import InProcessHub

TEXTS = [
    "When a word problem gives a rate and a time, multiply them to get the distance.",
    "When fractions have different denominators, rewrite them over the least common multiple.",
    "When a percentage increase is followed by a decrease, compute each step on the new base.",
]


async def open_nodes(tmp_path, hub, names="abc", **kw):
    # rule "mean" admits every verified row: these tests pin replication, and a row filter over a
    # three-row round may drop an honest row (see NodeConfig.rule); verification and re-encoding stay on.
    kw.setdefault("rule", "mean")
    interval = kw.pop("interval", 60.0)
    nodes = [await Node.open(NodeConfig(tmp_path / n, batch_interval_s=interval, **kw),
                             hub.transport()) for n in names]
    for node in nodes:
        await node.start()
    return nodes


async def settle(seconds: float = 0.3):
    await asyncio.sleep(seconds)


async def caught_up(hub: InProcessHub, *nodes: Node) -> None:
    """Every node has read and handled the whole log (a fixed sleep left a node behind at a load of 10)."""
    await hub.drained([n.durable for n in nodes], timeout_s=60)


def run(coro):
    return asyncio.run(coro)


def test_flush_publishes_to_every_other_node_and_search_finds_it(tmp_path, minilm):
    async def main():
        hub = InProcessHub()
        a, b, c = await open_nodes(tmp_path, hub)
        exps = [await a.submit(t, domain="math") for t in TEXTS]
        assert await a.flush() == 3
        await caught_up(hub, b, c)
        found = [[h.experience.id for h in await n.search(TEXTS[1], min_similarity=0.5)] for n in (b, c)]
        got = [await n.get(exps[0].id) for n in (b, c)]
        for n in (a, b, c):
            await n.close()
        return exps, found, got

    exps, found, got = run(main())
    assert all(exps[1].id in ids for ids in found)
    assert all(g is not None and g.text == TEXTS[0] for g in got)


def test_a_node_that_encodes_texts_ranks_peers_rows_by_its_own_floats(tmp_path, minilm):
    async def main():
        hub = InProcessHub()
        (a,), (b,), (c,) = [await open_nodes(tmp_path, hub, name, **kw)
                            for name, kw in (("a", {}), ("b", {"encode_texts": True}), ("c", {}))]
        exps = [await a.submit(t, domain="math") for t in TEXTS]
        await a.flush()
        for _ in range(300):  # b encodes the texts on arrival, loading its encoder first: seconds on a busy machine
            if all(len(n.library) == 3 for n in (b, c)):
                break
            await settle(0.1)
        held = [n.library.stats()["with_float_vector"] for n in (b, c)]
        query = "How do I add two fractions whose denominators differ?"
        hits = [(await n.search(query, min_similarity=0.2))[0] for n in (b, c)]
        enc = b.library.encoder
        exact = float(enc.encode([query], kind="query")[0] @ enc.encode([TEXTS[1]], kind="document")[0])
        for n in (a, b, c):
            await n.close()
        return exps, held, hits, exact

    exps, held, (on_b, on_c), exact = run(main())
    assert held == [3, 0]
    assert on_b.experience.id == on_c.experience.id == exps[1].id
    assert on_b.score == pytest.approx(exact, abs=1e-5)  # b's own floats; c has only a's code
    assert abs(on_c.score - exact) > 1e-4


def test_encode_texts_needs_an_encoder(tmp_path):
    with pytest.raises(NodeError, match="encode_texts"):
        NodeConfig(tmp_path, encoder=None, dim=8, encode_texts=True)


def test_batch_size_triggers_publishing_before_the_interval(tmp_path, minilm):
    async def main():
        hub = InProcessHub()
        a, b = await open_nodes(tmp_path, hub, "ab", batch_size=2)
        await a.submit(TEXTS[0])
        await settle()
        early = len(hub.log)
        await a.submit(TEXTS[1])
        await settle()
        late = len(hub.log)
        for n in (a, b):
            await n.close()
        return early, late

    assert run(main()) == (0, 1)


def test_close_flushes_pending_and_a_restarted_node_resumes_from_its_durable(tmp_path, minilm):
    async def main():
        hub = InProcessHub()
        a, b = await open_nodes(tmp_path, hub, "ab")
        await a.submit(TEXTS[0])
        await b.close()
        await a.close()  # graceful: publishes TEXTS[0]
        a2, = await open_nodes(tmp_path, hub, "a")
        await a2.submit(TEXTS[1])
        await a2.flush()
        b2, = await open_nodes(tmp_path, hub, "b")  # same data dir, same durable: resumes
        await caught_up(hub, a2, b2)
        sizes = [len(b2.library), len(a2.library)]
        for n in (a2, b2):
            await n.close()
        return sizes

    assert run(main()) == [2, 2]


def test_delete_replicates_only_for_the_author(tmp_path, minilm):
    async def main():
        hub = InProcessHub()
        a, b, c = await open_nodes(tmp_path, hub)
        e0, e1 = await a.submit(TEXTS[0]), await a.submit(TEXTS[1])
        await a.flush()
        await caught_up(hub, a, b, c)
        assert await a.delete(e0.id)  # the author retracts: gone everywhere
        assert await c.delete(e1.id)  # not the author: gone at C only
        await caught_up(hub, a, b, c)
        state = [[await n.get(e.id) is not None for e in (e0, e1)] for n in (a, b, c)]
        for n in (a, b, c):
            await n.close()
        return state

    assert run(main()) == [[False, True], [False, True], [False, False]]


def test_vectors_of_the_wrong_shape_or_nan_are_refused(tmp_path):
    async def main():
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=8), InProcessHub().transport())
        errors = []
        for v in ([1.0] * 7, [float("nan")] + [1.0] * 7, [0.0] * 8):
            with pytest.raises(NodeError) as info:
                await node.submit("When x, do y.", vector=v)
            errors.append(str(info.value))
        with pytest.raises(NodeError, match="no encoder"):
            await node.submit("When x, do y.")
        size = len(node.library)
        await node.close()
        return errors, size

    errors, size = run(main())
    assert "dimension 8" in errors[0] and "NaN" in errors[1] and "zero vector" in errors[2]
    assert size == 0


@pytest.fixture
def api(tmp_path):
    """A vector-only node behind its API, with a token, driven in-process."""
    loop = asyncio.new_event_loop()
    node = loop.run_until_complete(Node.open(NodeConfig(tmp_path, encoder=None, dim=16), InProcessHub().transport()))
    app = create_app(node, token="s3cret", max_body_bytes=4096, manage_node=False)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node",
                               headers={"Authorization": "Bearer s3cret"})
    yield loop, client, node
    loop.run_until_complete(client.aclose())
    loop.run_until_complete(node.close())
    loop.close()


def _vec(seed: int) -> list[float]:
    v = np.random.default_rng(seed).standard_normal(16)
    return (v / np.linalg.norm(v)).tolist()


def test_api_submit_get_search_delete_round_trip(api):
    loop, client, node = api
    listed = []

    async def main():
        r = await client.post("/experiences", json={"text": TEXTS[0], "domain": "math", "vector": _vec(1)})
        assert r.status_code == 201, r.text
        exp_id = r.json()["id"]
        got = (await client.get(f"/experiences/{exp_id}")).json()
        nonlocal listed
        listed = [e["id"] for e in (await client.get("/experiences", params={"domain": "math"})).json()["experiences"]]
        hits = (await client.post("/search", json={"vector": _vec(1), "min_similarity": 0.5})).json()["hits"]
        deleted = await client.delete(f"/experiences/{exp_id}")
        missing = await client.get(f"/experiences/{exp_id}")
        metrics = (await client.get("/metrics")).text
        return exp_id, got, hits, deleted.status_code, missing.status_code, metrics

    exp_id, got, hits, deleted, missing, metrics = loop.run_until_complete(main())
    assert got["text"] == TEXTS[0] and hits[0]["id"] == exp_id
    assert listed == [exp_id]
    assert (deleted, missing) == (200, 404)
    assert "dso_submitted_experiences_total 1.0" in metrics


def test_api_refuses_an_unauthenticated_body_before_reading_it_and_a_vector_with_no_float32_direction(api):
    loop, client, node = api

    async def main():
        read = []

        async def endless():  # a chunked body that would never end: it must not be read at all
            for _ in range(1000):
                read.append(1)
                yield b"x" * 65536

        anonymous = await client.post("/experiences", content=endless(), headers={"Authorization": ""})
        huge = await client.post("/experiences", json={"text": "When x, do y.", "vector": [1e20] * 16})
        return anonymous, len(read), huge

    anonymous, chunks_read, huge = loop.run_until_complete(main())
    assert anonymous.status_code == 401 and chunks_read <= 1
    assert huge.status_code == 201  # 1e20 everywhere is a direction: stored normalised, not as zeros
    stored = node.library.vectors([huge.json()["id"]])[0]
    assert np.isclose(np.linalg.norm(stored), 1.0, atol=1e-3)


def test_api_outcomes_count_only_for_retrievals_the_node_issued_and_only_once(api):
    loop, client, node = api
    peer = NodeIdentity.from_seed(b"outcome-peer")

    async def main():
        from dsonet.codec import make_batch
        from dsonet.experience import Experience

        batch = make_batch([Experience(TEXTS[1], "math", 0.7)], np.array([_vec(2)], np.float32), node.profile, peer)
        await node._locked(node.library.ingest, batch)
        before = node.soup.reputation.get(peer.node_id)
        found = (await client.post("/search", json={"vector": _vec(2), "min_similarity": 0.5})).json()
        first = await client.post("/outcomes", json={"retrieval_id": found["retrieval_id"], "helped": False})
        again = await client.post("/outcomes", json={"retrieval_id": found["retrieval_id"], "helped": False})
        forged = await client.post("/outcomes", json={"retrieval_id": "0" * 24, "helped": False})
        return found, first, again, forged, before, node.soup.reputation.get(peer.node_id)

    found, first, again, forged, before, after = loop.run_until_complete(main())
    assert found["hits"][0]["sources"] == [peer.node_id]
    assert first.status_code == 200 and first.json() == {"recorded": 1}
    assert after < before  # the source's reputation moved (DeltaSoup's feedback defence)
    assert node.library.outcomes(found["hits"][0]["id"]) == (1, 0)
    assert (again.status_code, forged.status_code) == (404, 404) and "already recorded" in again.json()["detail"]


def test_api_outcomes_judge_each_lesson_of_a_retrieval_apart_and_refuse_a_lesson_it_did_not_give(api):
    loop, client, node = api
    peers = [NodeIdentity.from_seed(b"lesson-peer-a"), NodeIdentity.from_seed(b"lesson-peer-b")]

    async def main():
        from dsonet.codec import make_batch
        from dsonet.experience import Experience

        near = np.array(_vec(5)) * 0.95 + np.array(_vec(6)) * 0.05
        texts = (TEXTS[2], "When a percentage grows twice, apply the second step to the new total.")
        for peer, text, vec in zip(peers, texts, (np.array(_vec(5)), near / np.linalg.norm(near))):
            batch = make_batch([Experience(text, "math", 0.7)], np.array([vec], np.float32), node.profile, peer)
            await node._locked(node.library.ingest, batch)
        before = [node.soup.reputation.get(p.node_id) for p in peers]
        found = (await client.post("/search", json={"vector": _vec(5), "min_similarity": 0.5})).json()
        ids = {h["sources"][0]: h["id"] for h in found["hits"]}
        stray = await client.post("/outcomes", json={"retrieval_id": found["retrieval_id"], "lessons": {"f" * 64: True}})
        both = await client.post("/outcomes", json={"retrieval_id": found["retrieval_id"], "helped": True,
                                                     "lessons": {ids[peers[0].node_id]: True}})
        judged = await client.post("/outcomes", json={"retrieval_id": found["retrieval_id"],
                                                       "lessons": {ids[peers[1].node_id]: False}})
        return stray, both, judged, before, [node.soup.reputation.get(p.node_id) for p in peers], ids

    stray, both, judged, before, after, ids = loop.run_until_complete(main())
    assert (stray.status_code, both.status_code) == (422, 422) and "not given by retrieval" in stray.json()["detail"]
    assert judged.status_code == 200 and judged.json() == {"recorded": 1}  # the refused reports kept the retrieval
    assert after[0] == before[0] and after[1] < before[1]  # only the lesson judged harmful moved its signer
    assert node.library.outcomes(ids[peers[1].node_id]) == (1, 0) and node.library.outcomes(ids[peers[0].node_id]) == (0, 0)


@pytest.mark.parametrize("body, headers, status, says", [
    (b'{"text": "When x, do y.", "vector": [1.0]}', {}, 400, "dimension 16"),
    (b'{"text": "When x, do y.", "vector": [NaN, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}', {}, 422, "finite"),
    (b'{"text": "When x, do y.", "vector": [1', {}, 422, "JSON"),
    (b'{"text": "When x, do y.", "domain": "Not A Tag", "vector": [1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}', {}, 400,
     "domain"),
    (b'{"text": "' + b"x" * 5000 + b'"}', {}, 413, "4096 bytes"),
    (b'{"text": "When x, do y."}', {"Authorization": ""}, 401, "missing token"),
    (b'{"text": "When x, do y."}', {"Authorization": "Bearer nope"}, 401, "wrong token"),
])
def test_api_malformed_requests_get_a_4xx_that_says_why_and_store_nothing(api, body, headers, status, says):
    loop, client, node = api

    async def main():
        r = await client.post("/experiences", content=body, headers={"content-type": "application/json", **headers})
        health = await client.get("/health")
        return r, health.status_code

    r, health = loop.run_until_complete(main())
    assert r.status_code == status, r.text
    assert says in json_detail(r)
    assert health == 200 and len(node.library) == 0


def json_detail(r) -> str:
    detail = r.json()["detail"]
    return detail if isinstance(detail, str) else str(detail)
