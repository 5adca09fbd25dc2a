"""The one attack-plan abstraction: an attack is told what it can see and answers with what it sends.

Every attack of the project sits behind `Attack`, whichever level it strikes at: a simulated
Byzantine node's batches in one round of the robustness fleet (`dsonet.sim.attacks`, given the
wire as a `dsonet.sim.attacks.View`), the demo's and the drift bench's classic wave (the same
attacks, through `dsonet.sim.adversary`), or hostile peers against one real node
(`dsonet.sim.node_attacks`, given the bench's material as a `NodeView`). Each is chosen by name
from the one registry, `dsonet.sim.attacks.attack`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

V = TypeVar("V", contravariant=True)


@dataclass
class Plan:
    """What one attack sends, and what a bench reads off the node afterwards. A fleet attack fills
    ``attackers`` and ``hostile`` only; the rest says how a node attack is delivered."""

    attackers: list  # identities
    hostile: list[bytes]  # published during the attack
    history: list[bytes] = field(default_factory=list)  # the attackers' batches sent before it, with the warm-up
    tombstones: list[bytes] = field(default_factory=list)
    honest: list[tuple[bytes, set]] = field(default_factory=list)  # more honest batches during it, with their rows
    honest_keys: set = field(default_factory=set)  # their signers (beside the twelve honest peers)
    lying: set = field(default_factory=set)  # (id, signer) rows that lie
    lures: np.ndarray | None = None  # (len(lying), d): the questions the lying rows aim at
    capacity: int | None = None  # None: the node's default
    warm_up: bool = True  # the twelve honest peers' batches and outcomes first
    lone: bool = False  # each message alone in its round
    in_order: bool = False  # published in the order given, not shuffled
    victim_key: tuple[str, str] | None = None


class Attack(Protocol[V]):
    """One attack: ``plan`` says what it sends, given the view ``V`` it needs."""

    name: str
    forged: bool = False  # its payloads must never be admitted: a bad signature,
    tampered: bool = False  # altered content,
    replayed: bool = False  # or a batch already received

    def plan(self, view: V) -> Plan:
        """What this attack sends, seeing ``view``."""
        ...
