"""A node whose durable consumer, or the whole stream, is deleted by someone else makes them again,
says so on /health, and goes on receiving (real nats-servers)."""

import asyncio

import numpy as np
import pytest

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.network.jetstream import NatsConfig, NatsTransport
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import subject_for

pytestmark = [pytest.mark.slow, pytest.mark.nats]
DIM = 16


async def _until(check, timeout_s: float = 30.0):
    for _ in range(int(timeout_s / 0.2)):
        if await check():
            return True
        await asyncio.sleep(0.2)
    return False


def test_a_deleted_consumer_and_a_deleted_stream_are_made_again(tmp_path, nats_cluster):
    async def main():
        config = NatsConfig(servers=nats_cluster.urls, check_interval_s=1.0)
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean"),
                               await NatsTransport.connect(config, name="reader"))
        await node.start()
        admin = await NatsTransport.connect(config, name="admin")  # the hostile client, and the publisher
        peer = NodeIdentity.from_seed(b"repair-peer")
        v = np.random.default_rng(0).standard_normal((2, DIM)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        batches = [make_batch([Experience(f"When repaired {i}, keep reading.", "math")], v[i:i + 1], node.profile,
                              peer) for i in range(2)]

        await admin.js.delete_consumer(config.stream, node.durable)
        await admin.publish(batches[0].to_msgpack(), subject_for("dso", "batch", "math"))
        got_first = await _until(lambda: node.get(batches[0].experiences[0].id))
        await admin.js.delete_stream(config.stream)
        await admin.publish(batches[1].to_msgpack(), subject_for("dso", "batch", "math"))  # makes it again
        got_second = await _until(lambda: node.get(batches[1].experiences[0].id))
        problem = node.transport.problem
        await admin.close()
        await node.close()
        return got_first, got_second, problem

    got_first, got_second, problem = asyncio.run(main())
    assert got_first and got_second
    assert "made again" in problem
