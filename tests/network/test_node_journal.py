"""A node keeps its journal as it works: each round's admitted rows (new, or held already), a message
refused whole before any round, reputation points after rounds and after reported outcomes; and the
journal outlives a restart."""

import asyncio

import numpy as np

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.network.journal import Journal
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import SENDER, InProcessHub, subject_for

DIM = 16
PEER = NodeIdentity.from_seed(b"journal-node-peer")


def _units(seed: int, n: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_a_node_logs_its_rounds_refusals_and_reputation_moves_and_keeps_them_over_a_restart(tmp_path):
    exps = [Experience(f"When journal case {i} comes, do step {i}.", "math") for i in range(3)]

    async def main():
        hub = InProcessHub()
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean", batch_interval_s=3600),
                               hub.transport())
        await node.start()
        sender = hub.transport()
        subject = subject_for("dso", "batch", "math")
        try:
            await sender.publish(make_batch(exps[:2], _units(1, 2), node.profile, PEER).to_msgpack(), subject)
            await hub.drained([node.durable])
            # the same two rows again in a new batch (held already), and one new row
            await sender.publish(make_batch(exps, _units(1, 3), node.profile, PEER).to_msgpack(), subject)
            await hub.drained([node.durable])
            await sender.publish(b"not a batch", subject, {SENDER: PEER.node_id})
            await hub.drained([node.durable])
            hits = await node.recall(vector=_units(1, 1)[0], k=3, min_similarity=-1.0)
            await node.outcome(hits.retrieval_id, helped=False)
            reputation = node.soup.reputation.get(PEER.node_id)
        finally:
            await node.close()
        return reputation

    reputation = asyncio.run(main())
    journal = Journal(tmp_path / "journal.sqlite")  # read after the node closed: the log is on disk
    refused, second, first = journal.rounds()
    assert (first.admitted, first.new, first.held) == (2, 2, 0)
    assert (second.admitted, second.new, second.held) == (3, 1, 2)
    assert refused.batches == 0 and list(refused.refused.values()) == [1]
    assert list(refused.refused)[0].endswith("(whole batch)")
    points = journal.history()[PEER.node_id]
    assert [p.cause for p in points] == ["round", "round", "harmed"]
    assert points[-1].reputation == reputation < points[-2].reputation
