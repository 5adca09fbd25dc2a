"""Helpers for learn tests whose subject is not storage."""

import os
import subprocess
import sys
from dataclasses import dataclass

from dsonet.experience import Experience
from dsonet.scope import Scope


@dataclass
class _Hit:
    experience: Experience
    score: float


class DictStore:
    """The library contract over a dict; search matches exact text only."""

    def __init__(self):
        self.items: dict[str, Experience] = {}
        self.outcomes: dict[str, list[int]] = {}

    def add(self, text, domain="general", confidence=0.5, scope=Scope(), provenance=None):
        exp = Experience(text, domain, confidence, scope=scope)
        self.items[exp.id] = exp
        return exp

    def update(self, exp_id, text):
        old = self.items.pop(exp_id)
        return self.add(text, old.domain, old.confidence)

    def delete(self, exp_id):
        return self.items.pop(exp_id, None) is not None

    def get(self, exp_id):
        return self.items.get(exp_id)

    def all(self):
        return list(self.items.values())

    def record_outcome(self, exp_id, helped, environment=None):
        uses = self.outcomes.setdefault(exp_id, [0, 0])
        uses[0] += 1
        uses[1] += int(helped)

    def search(self, query, k=5, min_similarity=0.6, max_tokens=2048, domain=None):
        """Exact text matches; with ``min_similarity`` below 0, every experience of the domain."""
        every = min_similarity is not None and min_similarity < 0  # None: the space's threshold, exact text here
        same = [e for e in self.items.values() if (every or e.text.lower() == query.lower())
                and domain in (None, e.domain)]
        return [_Hit(e, 1.0) for e in same][:k]




def outputs_under_hash_seeds(script: str, *args: str, seeds: int = 8) -> set[str]:
    """What ``python -c script args`` prints under PYTHONHASHSEED 0..seeds-1: one element where the
    result does not hang on a set's order, which changes with the interpreter's string hashes."""
    return {subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(seeds)}
