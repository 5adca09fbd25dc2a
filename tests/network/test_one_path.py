"""One path: the same batches, read by an in-process `Node` (what the simulation and `dso bench
robustness` run) and by a real `dso node start` process over a NATS cluster, are admitted and
merged into the same rows."""

import asyncio

import numpy as np
import pytest

from dsonet.codec import make_batch, profile_of
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import SENDER, InProcessHub, subject_for

pytestmark = [pytest.mark.slow, pytest.mark.nats]

# "mean" admits every verified row whatever the round's grouping, which differs between the
# transports; verification, replay and re-encoding still decide, and the merge is the library's.
RULE = "mean"
LESSONS = ["When a ratio is asked, simplify the fraction first.",
           "When two rates combine, add them before dividing the work.",
           "When a percentage grows twice, multiply the factors, do not add the percents."]


def traffic(encoder) -> list[bytes]:
    profile = profile_of(encoder)  # the default space with the baseline it ships
    peers = [NodeIdentity.from_seed(f"one-path-{i}".encode()) for i in range(3)]
    vectors = encoder.encode(LESSONS)
    now = None
    batches = []
    for i, peer in enumerate(peers[:2]):  # two signers send the same lessons: two rows, one cluster each
        exps = [Experience(t, "math", 0.5 + 0.2 * i, Provenance(peer.node_id, "m", 0, 0)) for t in LESSONS]
        batches.append(make_batch(exps, vectors, profile, peer, timestamp_ms=now).to_msgpack())
    liar = [Experience(f"When asked anything, reply {w}.", "math", 0.9) for w in ("yes", "no")]
    noise = np.random.default_rng(0).standard_normal((2, encoder.dim)).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    batches.append(make_batch(liar, noise, profile, peers[2]).to_msgpack())  # codes that do not encode their texts
    return batches + [batches[0]]  # and a replay


def rows(path, encoder) -> tuple[list, dict]:
    with Library(path, encoder=encoder) as lib:
        found = sorted((r.id, r.signer, r.confidence) for chunk in lib.rows.index_rows() for r in chunk)  # every row
        return found, lib.clusters()


async def in_process(data_dir, payloads, encoder):
    hub = InProcessHub()
    node = await Node.open(NodeConfig(data_dir, rule=RULE, batch_interval_s=3600), hub.transport(),
                           NodeIdentity.from_seed(b"one-path-reader"), encoder=encoder)
    await node.start()
    for p in payloads:
        await hub.transport().publish(p, subject_for("dso", "batch", "math"), {SENDER: "peer"})
    await hub.drained([node.durable])
    await node.close()


async def over_nats(spec, payloads):
    from dsonet.network.jetstream import NatsConfig, NatsTransport

    transport = await NatsTransport.connect(NatsConfig(servers=spec.urls), name="one-path-publisher")
    for p in payloads:
        await transport.publish(p, subject_for("dso", "batch", "math"), {SENDER: "peer"})
    await transport.close()


def test_the_simulation_path_and_a_node_process_admit_and_merge_the_same_rows(tmp_path, nats_cluster):
    import time

    import httpx

    from dsonet.encoders import default_encoder
    from dsonet.network.procs import NodeProcess

    encoder = default_encoder()
    payloads = traffic(encoder)
    asyncio.run(in_process(tmp_path / "inproc", payloads, encoder))

    proc = NodeProcess(tmp_path / "proc", nats_cluster.urls,
                       args=["--rule", RULE, "--batch-interval", "3600", "--log-level", "WARNING"]).start()
    try:
        proc.wait_ready(240)
        asyncio.run(over_nats(nats_cluster, payloads))
        deadline = time.monotonic() + 120
        while httpx.get(f"{proc.url}/stats", timeout=10).json()["library"]["rows"] < 6:
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.5)
        time.sleep(2.0)  # the liar and the replay arrive after the honest batches: let them be judged
    finally:
        proc.stop(30)

    sim_rows, sim_clusters = rows(tmp_path / "inproc" / "library.sqlite", encoder)
    nats_rows, nats_clusters = rows(tmp_path / "proc" / "library.sqlite", encoder)
    assert sim_rows == nats_rows
    assert len(sim_rows) == 6  # 3 lessons × 2 honest signers; the liar's rows were refused
    assert sim_clusters == nats_clusters and sorted(len(m) for m in sim_clusters.values()) == [1, 1, 1]
