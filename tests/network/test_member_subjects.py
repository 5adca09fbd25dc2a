"""A node publishes on its own subjects (``dso.batch.node-<id16>``, ``dso.tombstone.node-<id16>``:
a secured cluster's stream limits per subject are then limits per member), a tombstone queued under
an older subject included, and reads every member's subjects and the older ones alike."""

import asyncio

import numpy as np

from dsonet.codec import sign_batch
from dsonet.experience import experience_id
from dsonet.network.node import Node, NodeConfig
from dsonet.network.tombstone import make_tombstone
from dsonet.network.transport import InProcessHub, subject_for

DIM = 16


def _vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def test_a_node_publishes_on_its_own_subjects_and_reads_everyones(tmp_path):
    async def main():
        hub = InProcessHub()

        def config(name: str) -> NodeConfig:
            return NodeConfig(tmp_path / name, encoder=None, dim=DIM, batch_interval_s=3600)

        a, b = await Node.open(config("a"), hub.transport()), await Node.open(config("b"), hub.transport())
        await b.start()
        first = await a.submit("When a ratio is given, add its parts first.", "math", vector=_vec(1))
        gone = experience_id("When it was never held, nothing is deleted.", "math")
        old = make_tombstone([gone], a.identity).to_msgpack()  # queued before member subjects
        a.ledger.queue_outgoing(subject_for("dso", "tombstone", "math"), old)
        await a.flush()
        second = await a.submit("When a unit is missing, convert first.", "math", vector=_vec(2))
        await a.flush()
        await a.delete(second.id)
        legacy = await Node.open(config("c"), hub.transport())  # an older peer's subject: dso.batch.<domain>
        third = await legacy.submit("When the sum is odd, check parity.", "math", vector=_vec(3))
        exps, codes = legacy.library.unpublished()
        await hub.transport().publish(sign_batch(exps, codes, legacy.profile, legacy.identity).to_msgpack(),
                                      subject_for("dso", "batch", "math"))
        await hub.drained([b.durable])
        subjects = [m.subject for m in hub.log]
        held = {e.id for e in await b.all()}
        for node in (a, b, legacy):
            await node.close()
        return a.durable, subjects, held, first.id, second.id, third.id

    member, subjects, held, first, second, third = asyncio.run(main())
    assert subjects == [f"dso.tombstone.{member}", f"dso.batch.{member}", f"dso.batch.{member}",
                        f"dso.tombstone.{member}", "dso.batch.math"]
    assert first in held and second not in held and third in held  # its delete applied; the old subject read
