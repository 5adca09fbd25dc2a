"""What a search returns: the retrieval policy, one value object applied in one place.

The experience-ledger paper's rule: at most k = 5 experiences, each with similarity above 0.6,
and at most 2048 tokens of them, best first. `Library.search` applies it once; prompts render
what it returns without cutting again.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsonet.errors import DsoError

K = 5
MIN_SIMILARITY = 0.6
MAX_TOKENS = 2048


class PolicyError(DsoError, ValueError):
    """A retrieval policy that cannot be applied."""


@dataclass(frozen=True)
class RetrievalPolicy:
    k: int = K
    min_similarity: float = MIN_SIMILARITY  # cosine a hit must pass
    max_tokens: int = MAX_TOKENS  # of experience text, estimated (`estimate_tokens`)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise PolicyError(f"k: {self.k}; ask for at least one experience")
        if not -1.0 <= self.min_similarity <= 1.0:
            raise PolicyError(f"min_similarity: {self.min_similarity} is a cosine, so it must lie in [-1, 1]")
        if self.max_tokens < 1:
            raise PolicyError(f"max_tokens: {self.max_tokens}; give a positive token budget")

    def admits(self, score: float) -> bool:
        return score >= self.min_similarity

    def fits(self, used_tokens: int, text: str) -> bool:
        return used_tokens + estimate_tokens(text) <= self.max_tokens


def estimate_tokens(text: str) -> int:
    """Tokens without a tokenizer: the larger of words·4/3 and characters/4 (typical BPE ratios)."""
    return max(1, round(max(len(text.split()) * 4 / 3, len(text) / 4)))
