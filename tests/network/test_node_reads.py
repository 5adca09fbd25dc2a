"""Agents' reads keep being answered while the node ingests: a search waits for at most one
batch's transaction, never for a round, and sees the library as of a committed batch."""

import asyncio
import threading
import time

import numpy as np

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.network.access import FairLock, SerialEncoder
from dsonet.network.ingest import TURN_ROWS, _turns
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub, subject_for

DIM = 16
WAIT_S = 60  # a guard against a hung test only: the assertions are on order, not on time


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((1, DIM)).astype(np.float32)
    return v / np.linalg.norm(v)


async def _publish(hub, node, seeds):
    sender = hub.transport()
    for i in seeds:
        peer = NodeIdentity.from_seed(f"reads-{i}".encode())
        batch = make_batch([Experience(f"When case {i} comes, do step {i}.", "math")], _unit(i), node.profile, peer)
        await sender.publish(batch.to_msgpack(), subject_for("dso", "batch", "math"))


def _wait_until(condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the condition never came true")
        time.sleep(0.001)


def test_reads_are_answered_while_a_round_is_in_progress_and_see_the_committed_state(tmp_path):
    async def main():
        hub = InProcessHub()
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean"), hub.transport())
        await node.start()
        await _publish(hub, node, [0])
        await hub.drained([node.durable])
        in_round, release = threading.Event(), threading.Event()
        real_round = node.soup.round

        def slow_round(*args, **kwargs):  # a round that lasts until the test lets it end
            in_round.set()
            release.wait(WAIT_S)
            return real_round(*args, **kwargs)

        node.soup.round = slow_round
        await _publish(hub, node, range(1, 21))
        await asyncio.get_running_loop().run_in_executor(None, in_round.wait, WAIT_S)
        during = {
            "old": [h.experience.text for h in await node.search(vector=_unit(0)[0], min_similarity=0.9)],
            "new": [h.experience.text for h in await node.search(vector=_unit(5)[0], min_similarity=0.9)],
            "rows": (await node.stats())["library"]["rows"],
            "all": len(await node.all()),
            "round_still_running": not release.is_set(),
        }
        release.set()
        await hub.drained([node.durable])
        after = [h.experience.text for h in await node.search(vector=_unit(5)[0], min_similarity=0.9)]
        rows = (await node.stats())["library"]["rows"]
        await node.close()
        return during, after, rows

    during, after, rows = asyncio.run(main())
    assert during == {"old": ["When case 0 comes, do step 0."], "new": [], "rows": 1, "all": 1,
                      "round_still_running": True}
    assert after == ["When case 5 comes, do step 5."] and rows == 21


def test_a_search_asked_while_batches_are_stored_goes_before_the_rest_of_the_round(tmp_path):

    async def main():
        hub = InProcessHub()
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean"), hub.transport())
        await node.start()
        order, holding = [], threading.Event()
        lib = node.library
        real_ingest, real_search = lib.ingest, lib.search_vector

        def ingest(admitted, *args, **kwargs):  # runs holding the library's lock
            order.append(len(admitted.batch))
            if len(order) == 1:
                holding.set()
                _wait_until(lambda: node._state.waiting >= 1)  # the search below is queued for the lock
            return real_ingest(admitted, *args, **kwargs)

        def search_vector(*args, **kwargs):
            order.append("search")
            return real_search(*args, **kwargs)

        lib.ingest, lib.search_vector = ingest, search_vector
        sender = hub.transport()
        for p in range(6):  # one read, one round of six batches of 400 rows: turns of two batches
            peer = NodeIdentity.from_seed(f"turns-{p}".encode())
            exps = [Experience(f"When turn case {p}.{i} comes, do step {i}.", "math") for i in range(400)]
            vectors = np.concatenate([_unit(1000 * p + i) for i in range(400)])
            await sender.publish(make_batch(exps, vectors, node.profile, peer).to_msgpack(),
                                 subject_for("dso", "batch", "math"))
        await asyncio.get_running_loop().run_in_executor(None, holding.wait, WAIT_S)
        hits = await node.search(vector=_unit(0)[0], min_similarity=0.9)
        await hub.drained([node.durable])
        held = len(node.library)
        await node.close()
        return order, hits, held

    order, hits, held = asyncio.run(main())
    assert order == [400, 400, "search", 400, 400, 400, 400] and 2 * 400 <= TURN_ROWS < 3 * 400
    texts = [h.experience.text for h in hits]
    assert texts[0] == "When turn case 0.0 comes, do step 0."
    assert all(t.startswith(("When turn case 0.", "When turn case 1.")) for t in texts)  # the committed turn only
    assert held == 2400


def test_turns_group_small_batches_and_never_split_one():

    assert _turns([1] * 5, rows=3) == [[0, 1, 2], [3, 4]]
    assert _turns([400, 400, 400, 1000, 5], rows=1000) == [[0, 1], [2], [3], [4]]
    assert _turns([], rows=10) == []


def test_the_fair_lock_hands_turns_out_in_the_order_they_were_asked_for():
    lock, order, asked = FairLock(), [], threading.Event()

    def looper():
        for i in range(50):
            with lock:
                order.append(f"loop{i}")
                if i == 0:
                    asked.set()
                    _wait_until(lambda: lock.waiting >= 1)

    def once():
        asked.wait(WAIT_S)
        with lock:
            order.append("once")

    threads = [threading.Thread(target=looper), threading.Thread(target=once)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert order[:3] == ["loop0", "once", "loop1"] and len(order) == 51


def test_a_query_waits_for_one_chunk_of_a_long_encode_not_for_all_of_it():
    calls, first = [], threading.Event()

    class Recording:  # records what each encode call held
        id, dim = "recording", 4

        def encode(self, texts, kind="document"):
            calls.append((kind, len(texts)))
            if len(calls) == 1:
                first.set()
                _wait_until(lambda: shared._turn.waiting >= 1)
            return np.ones((len(texts), 4), np.float32)

    shared = SerialEncoder(Recording(), chunk=8)
    long = threading.Thread(target=lambda: shared.encode([f"text {i}" for i in range(40)]))
    long.start()
    first.wait(WAIT_S)
    q = shared.encode(["a question"], kind="query")
    long.join(WAIT_S)
    assert calls == [("document", 8), ("query", 1)] + [("document", 8)] * 4
    assert q.shape == (1, 4) and shared.dim == 4 and shared.id == "recording"


def test_a_burst_of_submissions_is_merged_once_and_its_rows_are_searchable_before(tmp_path):
    async def main():
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM), InProcessHub().transport())
        merges, busy = [], threading.Event()
        real = node.library.build_merged
        node.library.build_merged = lambda jobs: (merges.append(1), real(jobs))[1]
        node._worker.submit(busy.wait, WAIT_S)  # the ingest thread is busy (a long round)
        for i in range(5):
            await node.submit(f"When burst case {i} comes, do step {i}.", "math", vector=_unit(i)[0])
        found = await node.search(vector=_unit(3)[0], min_similarity=0.9)  # answered while the ingest thread is busy
        busy.set()
        await node.close()
        return len(merges), [h.experience.text for h in found]

    merges, found = asyncio.run(main())
    assert merges == 1
    assert found[0] == "When burst case 3 comes, do step 3."
