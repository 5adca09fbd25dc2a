"""A batch alone in its round is judged beside trusted rows, not by itself alone (issue 14,
finding 2): on a node that has written nothing itself, peers' rows trusted by outcomes are the
reference (a quarter of it at most from any one of them)."""

import asyncio

import numpy as np

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub, subject_for

DIM = 16
CENTER = np.eye(1, DIM, dtype=np.float32)[0]


def _near(seed: int, n: int) -> np.ndarray:
    """Rows around one direction, as one domain's lessons are."""
    x = CENTER + 0.15 * np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_a_lone_far_batch_on_a_node_with_no_rows_of_its_own_is_judged_beside_trusted_peers(tmp_path):
    async def main():
        hub = InProcessHub()
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM), hub.transport())  # the median rule
        await node.start()
        sender, peer = hub.transport(), NodeIdentity.from_seed(b"long-running-peer")
        for b in range(6):  # six good batches: volume alone does not make the peer trusted (issue 24) ...
            exps = [Experience(f"When lesson {b}.{i} applies, use it.", "math") for i in range(20)]
            await sender.publish(make_batch(exps, _near(b, 20), node.profile, peer).to_msgpack(),
                                 subject_for("dso", "batch", "math"))
        await hub.drained([node.durable])
        by_volume = node.soup.reputation.get(peer.node_id) >= node.soup.config.trusted
        hits = await node.search(vector=CENTER, min_similarity=0.0)  # ... agents reporting its lessons helped do
        await node.record_outcome([h for h in hits if peer.node_id in h.sources], True)
        trusted = not by_volume and node.soup.reputation.get(peer.node_id) >= node.soup.config.trusted
        lone = {}
        for name, vector in (("far", -CENTER), ("near", _near(99, 1)[0])):  # each alone in its round, from a new key
            exp = Experience(f"When the {name} case comes, do this.", "math")
            batch = make_batch([exp], vector[None, :], node.profile, NodeIdentity.from_seed(name.encode()))
            await sender.publish(batch.to_msgpack(), subject_for("dso", "batch", "math"))
            await hub.drained([node.durable])
            lone[name] = await node.get(exp.id) is not None
        await node.close()
        return trusted, lone

    trusted, lone = asyncio.run(main())
    assert trusted
    assert lone == {"far": False, "near": True}
