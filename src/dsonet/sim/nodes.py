"""Fleets of real nodes for scenarios (`dsonet.sim.scenario`: the demo, `dso bench learn --family drift`),
behind one small interface, and the in-process implementation (`nats_nodes`: node processes on a
NATS cluster; `scenario.running` starts either).

What a scenario needs from a fleet, and nothing more: each honest node's experience store (where
its agent learns and from which it answers), a way to make every honest node publish what it
holds, a connection to the same log for the attackers, the log of what crossed the wire, a
wait until every node has read all of it, and, at the end, what each honest node kept and
whose batches it refused.

Honest nodes hold what their agents learn until `publish()`: their batch interval is an hour
and their batch size unbounded, so the scenario decides when sharing happens and can measure each
node's own lessons before any peer's arrive.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from dsonet.codec.batch import Profile
from dsonet.errors import DsoError
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Hits
from dsonet.library.contract import LessonStore
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import InProcessHub, Message, Transport, parse_subject
from dsonet.scope import Scope

HOLD_INTERVAL_S = 3600.0  # nodes publish only when the scenario says so (see the module docstring)
HOLD_BATCH = 1_000_000


class FleetError(DsoError):
    """Nodes that did not start or did not catch up with the log."""


@dataclass(frozen=True)
class NodeState:
    """What one honest node holds at the end of the run."""

    node_id: str
    experiences: list[Experience]  # its whole library: its own and what it admitted from peers
    peers: list[dict]  # one per sender it heard from: node_id, accepted, rejected, reputation...


@runtime_checkable
class Fleet(Protocol):
    kind: str  # "in-process" or "nats", for the report
    node_ids: list[str]  # the honest nodes, in order
    public_keys: list[bytes]  # theirs, as any peer knows them (a forger claims one)
    stores: list[LessonStore]  # where honest node i's agent learns and from which it answers
    encoder: object  # the profile's encoder: a public model, which attackers may run too
    profile: Profile
    attacker: Transport  # a connection to the same log, for the Byzantine nodes

    async def publish(self) -> None:
        """Every honest node publishes what it holds; returns once the log has stored it."""

    def wire(self) -> list[Message]:
        """Every message on the log so far, in log order (complete after `settle`)."""

    async def settle(self, timeout_s: float = 300.0) -> None:
        """Wait until every reader of the log has processed all of it."""

    async def recall(self, i: int, query: str, k: int, min_similarity: float,
                     environment: Scope | None = None) -> Hits:
        """Honest node i's lessons for ``query`` (in the asker's ``environment``), with the retrieval id to
        report their outcome under (``retrieval_id``)."""

    async def outcome(self, i: int, retrieval_id: str, helped: bool | None = None,
                      lessons: dict[str, bool] | None = None) -> int:
        """Report to honest node i whether a retrieval's lessons helped, all or each (`POST /outcomes`)."""

    async def close(self) -> list[NodeState]:
        """Stop every node; return what each honest node holds. A second call returns the same."""


def is_batch(message: Message) -> bool:
    subject = parse_subject(message.subject)
    return subject is not None and subject.kind == "batch"


def node_seed(i: int) -> bytes:
    """Honest node i's key seed: the same fleet gets the same identities in every run."""
    return f"demo-honest-{i}".encode()


class InProcessFleet:
    """Honest `Node`s in this process on one shared `InProcessHub` log. Their agents use each
    node's `Library` directly, and only while the node is idle (before `publish`, after `settle`)."""

    kind = "in-process"

    def __init__(self, hub: InProcessHub, nodes: list[Node]):
        self.hub, self.nodes = hub, nodes
        self.node_ids = [n.node_id for n in nodes]
        self.public_keys = [n.identity.public_key for n in nodes]
        self.stores = [n.library for n in nodes]
        self.encoder, self.profile = nodes[0].encoder, nodes[0].profile
        self.attacker = hub.transport()
        self._started = False
        self._final: list[NodeState] = []
        self._closed = False

    @classmethod
    async def start(cls, honest: int, workdir: Path, model: str = "") -> "InProcessFleet":
        configs = [NodeConfig(data_dir=workdir / f"node{i}", batch_interval_s=HOLD_INTERVAL_S, batch_size=HOLD_BATCH,
                              model=model) for i in range(honest)]
        return await cls.open(configs, [NodeIdentity.from_seed(node_seed(i)) for i in range(honest)])

    @classmethod
    async def open(cls, configs: list[NodeConfig], identities: list[NodeIdentity], hub: InProcessHub | None = None,
                   encoder=None, profile: Profile | None = None) -> "InProcessFleet":
        """Nodes of any configuration on one log: ``hub`` a simulation's (on its own clock), ``encoder`` and
        ``profile`` shared by every node (a simulation's own space), else each node's default."""
        hub = hub or InProcessHub()
        nodes = [await Node.open(config, hub.transport(), identity, encoder=encoder, profile=profile)
                 for config, identity in zip(configs, identities)]
        return cls(hub, nodes)

    async def listen(self) -> None:
        """Start every node's reader of the log (the first `publish` does it too)."""
        if not self._started:
            for node in self.nodes:
                await node.start()
            self._started = True

    async def publish(self) -> None:
        await self.listen()  # readers start with the first publish at the latest: before it there is nothing to read
        for node in self.nodes:
            await node.flush()

    def wire(self) -> list[Message]:
        return list(self.hub.log)

    async def recall(self, i: int, query: str, k: int, min_similarity: float,
                     environment: Scope | None = None) -> Hits:
        return await self.nodes[i].recall(query, k=k, min_similarity=min_similarity, environment=environment)

    async def outcome(self, i: int, retrieval_id: str, helped: bool | None = None,
                      lessons: dict[str, bool] | None = None) -> int:
        return await self.nodes[i].outcome(retrieval_id, helped, lessons)

    async def settle(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while any(pos < len(self.hub.log) for pos in self.hub.positions.values()):
            if time.monotonic() > deadline:
                raise FleetError(f"nodes did not catch up with the log of {len(self.hub.log)} messages "
                                 f"in {timeout_s:.0f} s: {self.hub.positions}")
            await asyncio.sleep(0.01)  # as often as the hub's own `drained`: a bench times what follows

    async def close(self) -> list[NodeState]:
        if self._closed:
            return self._final
        self._closed = True
        try:
            self._final = [NodeState(n.node_id, n.library.all(), n.peer_list()) for n in self.nodes]
        finally:
            for node in self.nodes:
                await node.close()
            await self.attacker.close()
        return self._final
