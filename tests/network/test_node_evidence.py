"""A lesson learned from traffic is published with its evidence, and published again as it grows: a peer
that held it with less sees the larger counts (issue 35). Vector-only nodes on the in-process transport."""

import asyncio

import numpy as np

from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub

LESSON = "When your code would use np.trapz, use np.trapezoid(y, x) instead"


def _vec() -> list[float]:
    v = np.random.default_rng(3).standard_normal(16)
    return (v / np.linalg.norm(v)).tolist()


def test_a_lessons_evidence_reaches_a_peer_and_its_growth_is_published_again(tmp_path):
    async def main():
        hub = InProcessHub()
        a, b = [await Node.open(NodeConfig(tmp_path / n, encoder=None, dim=16, rule="mean"), hub.transport())
                for n in "ab"]
        for node in (a, b):
            await node.start()
        exp = await a.submit(LESSON, "code", 0.3, vector=_vec())
        seen = []
        for _ in range(2):  # one episode of a new agent, then one of the same agent
            await a.add_evidence(exp.id, 1, int(not seen))
            assert await a.flush() == 1
            await hub.drained([b.durable], timeout_s=60)
            got = await b.get(exp.id)
            seen.append((got.provenance.node_id, got.provenance.episodes, got.provenance.agents))
        hits = await b.search(vector=_vec(), min_similarity=0.5)
        missing = await a.add_evidence("0" * 64)
        for node in (a, b):
            await node.close()
        return a.node_id, seen, hits[0].experience.provenance, missing

    author, seen, shown, missing = asyncio.run(main())
    assert seen == [(author, 1, 1), (author, 2, 1)]  # the peer's row of the lesson, grown in place
    assert (shown.episodes, shown.agents) == (2, 1) and missing is None
