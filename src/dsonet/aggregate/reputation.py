"""Peer reputation: an exponential moving average of 0/1 outcomes (federated-agents paper §5)."""

from __future__ import annotations


class Reputation:
    """rep ← decay · rep + (1 − decay) · r, r ∈ {0, 1}; peers under ``floor`` are skipped."""

    def __init__(self, decay: float = 0.9, floor: float = 0.3, initial: float = 0.5):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay: {decay!r} must lie in [0, 1); the paper uses 0.9")
        if not 0.0 <= floor <= 1.0 or not 0.0 <= initial <= 1.0:
            raise ValueError(f"floor ({floor!r}) and initial ({initial!r}) must lie in [0, 1]")
        self.decay, self.floor, self.initial = decay, floor, initial
        self._rep: dict[str, float] = {}

    def get(self, node_id: str) -> float:
        return self._rep.get(node_id, self.initial)

    def update(self, node_id: str, r: int) -> float:
        if r not in (0, 1):
            raise ValueError(f"r: {r!r} must be 0 (failed) or 1 (succeeded)")
        rep = self.decay * self.get(node_id) + (1.0 - self.decay) * r
        self._rep[node_id] = rep
        return rep

    def skipped(self, node_id: str) -> bool:
        return self.get(node_id) < self.floor

    def snapshot(self) -> dict[str, float]:
        return dict(self._rep)

    def forget(self, node_id: str) -> None:
        """Back to ``initial``, as a key never seen (an operator's reset; `dsonet.network.standing`)."""
        self._rep.pop(node_id, None)
