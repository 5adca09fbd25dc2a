"""Peer reputation: one number per key, earned by outcomes, not by volume.

The federated-agents paper (§5) moves reputation as an exponential moving average of 0/1 results,
rep ← decay · rep + (1 − decay) · r, from an initial value, and skips keys under a floor. Our
reading of what r may be:

    outcome(key, helped)   an agent reported whether one of the key's lessons helped (r = helped):
                           the paper's step, unbounded. Only this lifts a key to ``trusted``.
    admitted(key)          a batch passed every check: the step with r = 1, but never past
                           ``volume_ceiling`` (below ``trusted``), never lowering a key already
                           above it, and nothing at all for a key whose harmful outcomes outnumber
                           its helpful ones. Volume keeps an honest key from sinking after a false
                           alarm; it cannot buy trust, nor wash out what agents reported.
    failed(key)            a check the key failed (a filter refusal that outcome-trusted keys
                           agree with): r = 0.
    caught(key)            a text the key sent does not encode to its code (re-encoding): r = 0,
                           and no higher than ``volume_ceiling``: trust that thinned the checks is
                           gone at once (0.9 · rep alone leaves a key at 0.95 trusted), so every
                           row it sends is checked until agents' outcomes lift it again.

So a key at ``trusted`` or above got there through helpful outcomes: five from 0.5 alone, three
after volume brought it to 0.6 (0.6 → 0.64 → 0.676 → 0.708). Five harmful outcomes from 0.5 put a
key under the floor 0.3 (0.5 · 0.9⁵ ≈ 0.295), with or without its volume.

A key is skipped (its batches refused, its rows hidden from searches) under the floor, or once it
is ``convicted``: its harmful outcomes outnumber its helpful ones beyond chance (a one-sided sign
test). The average forgets order-blind evidence: in the drift bench a poisoner reported harmful 11
times and then helpful twice (a copy of a correct lesson merged with its own) rose from 0.157 back
to 0.317, over the floor, and its 72 rows came back into one honest node's searches.
"""

from __future__ import annotations

from math import comb


def harm_p(helped: int, harmed: int) -> float:
    """One-sided sign test: under even odds, the chance of ``harmed`` or more harmful outcomes among
    ``helped + harmed`` (five harmful and none helpful: 1/32; eleven of thirteen: 0.011; four of five: 0.19)."""
    n = helped + harmed
    return sum(comb(n, k) for k in range(harmed, n + 1)) / 2 ** n


class Reputation:
    """rep ← decay · rep + (1 − decay) · r, r ∈ {0, 1}; keys under ``floor`` are skipped; admitted
    batches lift a key to ``volume_ceiling`` at most (None: no ceiling, the paper's reading)."""

    def __init__(self, decay: float = 0.9, floor: float = 0.3, initial: float = 0.5,
                 volume_ceiling: float | None = None, trusted: float = 0.7, conviction_p: float | None = 0.05):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay: {decay!r} must lie in [0, 1); the paper uses 0.9")
        if not 0.0 <= floor <= 1.0 or not 0.0 <= initial <= 1.0:
            raise ValueError(f"floor ({floor!r}) and initial ({initial!r}) must lie in [0, 1]")
        if volume_ceiling is not None and not initial <= volume_ceiling < trusted:
            raise ValueError(f"volume_ceiling: {volume_ceiling!r} must lie in [initial {initial}, trusted {trusted}): "
                             "volume alone must not make a key trusted")
        self.decay, self.floor, self.initial = decay, floor, initial
        if conviction_p is not None and not 0.0 < conviction_p < 1.0:
            raise ValueError(f"conviction_p: {conviction_p!r} must lie in (0, 1), e.g. 0.05; None turns conviction off")
        self.volume_ceiling, self.trusted_at, self.conviction_p = volume_ceiling, trusted, conviction_p
        self._rep: dict[str, float] = {}
        self._outcomes: dict[str, tuple[int, int]] = {}  # key -> (helped, harmed) reported on its lessons

    def get(self, node_id: str) -> float:
        return self._rep.get(node_id, self.initial)

    def update(self, node_id: str, r: int) -> float:
        """The paper's step, whatever r stands for."""
        if r not in (0, 1):
            raise ValueError(f"r: {r!r} must be 0 (failed) or 1 (succeeded)")
        rep = self.decay * self.get(node_id) + (1.0 - self.decay) * r
        self._rep[node_id] = rep
        return rep

    def outcome(self, node_id: str, helped: bool) -> float:
        """An agent's verdict on one of the key's lessons."""
        helped_n, harmed_n = self._outcomes.get(node_id, (0, 0))
        self._outcomes[node_id] = (helped_n + bool(helped), harmed_n + (not helped))
        return self.update(node_id, int(bool(helped)))

    def admitted(self, node_id: str) -> float:
        """A batch of the key passed every check: towards the volume ceiling, never past it."""
        rep = self.get(node_id)
        if self.volume_ceiling is None:
            return self.update(node_id, 1)
        if self.condemned(node_id) or rep >= self.volume_ceiling:
            return rep
        self._rep[node_id] = min(self.volume_ceiling, self.decay * rep + (1.0 - self.decay))
        return self._rep[node_id]

    def failed(self, node_id: str) -> float:
        return self.update(node_id, 0)

    def caught(self, node_id: str) -> float:
        rep = self.update(node_id, 0)
        if self.volume_ceiling is not None and rep > self.volume_ceiling:
            self._rep[node_id] = rep = self.volume_ceiling
        return rep

    def trusted(self, node_id: str) -> bool:
        """At ``trusted`` or above: with a volume ceiling, only helpful outcomes lead there."""
        return self.get(node_id) >= self.trusted_at

    def condemned(self, node_id: str) -> bool:
        """Agents reported more harm than help from the key's lessons."""
        helped_n, harmed_n = self._outcomes.get(node_id, (0, 0))
        return harmed_n > helped_n

    def outcomes(self, node_id: str) -> tuple[int, int]:
        """(helped, harmed) outcomes reported on the key's lessons."""
        return self._outcomes.get(node_id, (0, 0))

    def convicted(self, node_id: str) -> bool:
        """Agents' reports say the key's lessons harm more often than they help, beyond chance: under
        even odds, as many harmful outcomes or more would come up with probability (`harm_p`) under
        ``conviction_p``."""
        helped, harmed = self.outcomes(node_id)
        if self.conviction_p is None or harmed <= helped:
            return False
        return harm_p(helped, harmed) < self.conviction_p

    def skipped(self, node_id: str) -> bool:
        """Under the floor, or convicted by outcomes: its batches are refused and its rows hidden."""
        return self.get(node_id) < self.floor or self.convicted(node_id)

    def snapshot(self) -> dict[str, float]:
        return dict(self._rep)

    def state(self) -> dict[str, tuple[float, int, int]]:
        """Every key moved from the initial state: (reputation, helped, harmed), to keep across restarts."""
        return {k: (self.get(k), *self.outcomes(k)) for k in self._rep.keys() | self._outcomes.keys()}

    def restore(self, state: dict[str, tuple[float, int, int]]) -> None:
        """Keys as `state` gave them (a restarted receiver's); a value out of range is refused."""
        for key, (rep, helped, harmed) in state.items():
            if not 0.0 <= rep <= 1.0 or helped < 0 or harmed < 0:
                raise ValueError(f"reputation of {key[:12]}…: ({rep!r}, {helped!r}, {harmed!r}) is out of range; "
                                 "a reputation lies in [0, 1], outcome counts are ≥ 0")
            self._rep[key] = float(rep)
            if helped or harmed:
                self._outcomes[key] = (int(helped), int(harmed))

    def forget(self, node_id: str) -> None:
        """Back to ``initial`` with no outcomes, as a key never seen (an operator's reset;
        `dsonet.network.standing`)."""
        self._rep.pop(node_id, None)
        self._outcomes.pop(node_id, None)
