"""The fleet as separate processes: a three-server NATS JetStream cluster on loopback and one
`dso node start` process per honest node, all started and stopped here (`dso demo --nats`).

The agents reach their nodes through the HTTP API (`NodeClient` is an experience store). The
demo reads the stream with a durable consumer of its own ("demo-observer"), which is also the
attackers' connection. A node process publishes what it holds when it shuts down gracefully,
so `publish()` restarts every node. At the end the nodes stop and their SQLite libraries are
read from disk.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from dsonet.codec import profile_of
from dsonet.sim.nodes import HOLD_BATCH, HOLD_INTERVAL_S, FleetError, NodeState
from dsonet.encoders import default_encoder
from dsonet.identity import NodeIdentity
from dsonet.library import Hits, Library
from dsonet.network import cluster
from dsonet.network.cluster_spec import ClusterSpec, make_spec
from dsonet.network.client import NodeClient
from dsonet.network.jetstream import NatsConfig, NatsTransport
from dsonet.network.procs import NodeProcess
from dsonet.network.transport import Message
from dsonet.scope import Scope

OBSERVER = "demo-observer"
READY_S = 600.0  # a node process loads the encoder before it answers /health: minutes on a busy 2-core machine


class NatsFleet:
    kind = "nats"

    def __init__(self, spec: ClusterSpec, procs: list[NodeProcess], observer: NatsTransport):
        self.spec, self.procs, self.attacker = spec, procs, observer
        self.stores = [NodeClient(p.url) for p in procs]
        self.node_ids = [c.stats()["node_id"] for c in self.stores]
        self.public_keys = [NodeIdentity.load(p.data_dir / "node.key").public_key for p in procs]
        self.encoder = default_encoder()  # what `dso node start` runs by default
        self.profile = profile_of(self.encoder)
        if self.stores[0].stats()["profile"] != self.profile.to_dict():
            raise FleetError(f"the node processes run the profile {self.stores[0].stats()['profile']}, "
                             f"not the default encoder's {self.profile.to_dict()}")
        self._seen: dict[int, Message] = {}
        self._final: list[NodeState] = []
        self._closed = False

    @classmethod
    async def start(cls, honest: int, workdir: Path, model: str = "") -> "NatsFleet":
        """``model`` is not passed on: a node process records its own provenance."""
        spec = cluster.up(make_spec(workdir / "nats", client_port=None, cluster_port=None, http_port=None))
        procs = [NodeProcess(workdir / f"node{i}", spec.urls,
                             args=["--batch-interval", str(HOLD_INTERVAL_S), "--batch-size", str(HOLD_BATCH)])
                 for i in range(honest)]
        observer = None
        try:
            await asyncio.to_thread(_start_all, procs)
            observer = await NatsTransport.connect(NatsConfig(servers=spec.urls), name=OBSERVER)
            fleet = cls(spec, procs, observer)
            await observer.subscribe(OBSERVER, fleet._collect)
            return fleet
        except BaseException:
            await asyncio.to_thread(_stop_all, procs)
            if observer is not None:
                await observer.close()
            cluster.down(spec.state_dir)
            raise

    async def recall(self, i: int, query: str, k: int, min_similarity: float,
                     environment: Scope | None = None) -> Hits:
        return await asyncio.to_thread(self.stores[i].search, query, k, min_similarity, environment=environment)

    async def outcome(self, i: int, retrieval_id: str, helped: bool | None = None,
                      lessons: dict[str, bool] | None = None) -> int:
        return await asyncio.to_thread(self.stores[i].outcome, retrieval_id, helped, lessons)

    async def _collect(self, chunk: list[Message]) -> None:
        self._seen.update((m.seq, m) for m in chunk)  # keyed by seq: a redelivered chunk counts once

    async def publish(self) -> None:
        """SIGTERM makes each node publish what it holds before it exits; then they start again."""
        await asyncio.to_thread(_stop_all, self.procs)
        await asyncio.to_thread(_start_all, self.procs)

    def wire(self) -> list[Message]:
        return [self._seen[seq] for seq in sorted(self._seen)]

    async def settle(self, timeout_s: float = 300.0) -> None:
        """Until every durable consumer of the stream (the nodes' and ours) has acknowledged all of it, up
        to its last message as the stream's leader knows it. A consumer's own count of what is pending
        comes from its leader's replica, which may not have stored the last publish yet (a quorum acked
        it): that count alone can read 0 before the poison is read (the likely cause of a CI run whose
        poisoned condition was answered as if the poison had not come)."""
        js, stream = self.attacker.js, self.attacker.config.stream
        last = (await js.stream_info(stream)).state.last_seq
        deadline = time.monotonic() + timeout_s
        while True:
            consumers = await js.consumers_info(stream)
            behind = {c.name: last - _acked(c) for c in consumers if _acked(c) < last or c.num_ack_pending}
            if not behind and len(consumers) > len(self.procs):
                return
            if time.monotonic() > deadline:
                raise FleetError(f"consumers still behind the stream's message {last} after {timeout_s:.0f} s: "
                                 f"{behind}")
            await asyncio.sleep(0.5)

    async def close(self) -> list[NodeState]:
        if self._closed:
            return self._final
        self._closed = True
        try:
            peers = [c.peers() for c in self.stores]
            await asyncio.to_thread(_stop_all, self.procs)
            states = []
            for proc, node_id, node_peers in zip(self.procs, self.node_ids, peers):
                with Library(proc.data_dir / "library.sqlite", encoder=self.encoder) as lib:
                    states.append(NodeState(node_id, lib.all(), node_peers))
            self._final = states
        finally:
            await asyncio.to_thread(_stop_all, self.procs)
            for client in self.stores:
                client.close()
            await self.attacker.close()
            cluster.down(self.spec.state_dir)
        return self._final


def _start_all(procs: list[NodeProcess]) -> None:
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.wait_ready(READY_S)


def _stop_all(procs: list[NodeProcess]) -> None:
    for proc in procs:
        proc.stop()


def _acked(consumer) -> int:
    """The stream sequence up to which a consumer has acknowledged every message."""
    return consumer.ack_floor.stream_seq if consumer.ack_floor is not None else 0
