"""What a search returns: the retrieval policy, one value object applied in one place.

The experience-ledger paper's rule: at most k = 5 experiences, each with similarity above 0.6,
and at most 2048 tokens of them, best first. `Library.search` applies it once; prompts render
what it returns without cutting again.

The paper's 0.6 is a cosine in *its* encoder's space. In ours a question and the lesson that
helps it score 0.3-0.6 (a general lesson against a concrete question), so 0.6 drops most of
them. Each shipped space therefore carries its own threshold, calibrated on labelled
(question, lesson) pairs by `dso bench relevance` and kept beside the head's config
(``relevance.json``, not part of the profile: the profile key and the wire stay the same).
`default_min_similarity` is the one place every entry point reads it from; ``min_similarity``
left as None anywhere means "this".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from dsonet.codec.profile import Profile
from dsonet.encoders.base import Encoder
from dsonet.encoders.default import DEFAULT_HEAD
from dsonet.errors import DsoError

K = 5
MIN_SIMILARITY = 0.6  # the protocol's (experience-ledger) threshold: the fallback for a space never calibrated
MAX_TOKENS = 2048
ENV_MIN_SIMILARITY = "DSONET_MIN_SIMILARITY"  # overrides every space's calibrated threshold
CALIBRATION_NAME = "relevance.json"  # beside a shipped head's config.json (see `dsonet.bench.relevance`)
RESCORE_NAME = "rescore.json"  # beside a backbone's weights: its second stage's threshold (`dsonet.encoders.rescore`)


class PolicyError(DsoError, ValueError):
    """A retrieval policy that cannot be applied."""


Space = str | Profile | Encoder  # a space's id, a profile naming it, or its encoder


@dataclass(frozen=True)
class RetrievalPolicy:
    k: int = K
    min_similarity: float | None = None  # cosine a hit must pass; None: the space's (`default_min_similarity`)
    max_tokens: int = MAX_TOKENS  # of experience text, estimated (`estimate_tokens`)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise PolicyError(f"k: {self.k}; ask for at least one experience")
        if self.min_similarity is not None and not -1.0 <= self.min_similarity <= 1.0:
            raise PolicyError(f"min_similarity: {self.min_similarity} is a cosine, so it must lie in [-1, 1]")
        if self.max_tokens < 1:
            raise PolicyError(f"max_tokens: {self.max_tokens}; give a positive token budget")

    def resolved(self, space: Space | None = None) -> RetrievalPolicy:
        """This policy with its threshold set: the space's calibrated one where it was left None."""
        if self.min_similarity is not None:
            return self
        return RetrievalPolicy(self.k, default_min_similarity(space), self.max_tokens)

    def admits(self, score: float) -> bool:
        if self.min_similarity is None:
            raise PolicyError("min_similarity: None; resolve the policy for a space first (`resolved`)")
        return score >= self.min_similarity

    def fits(self, used_tokens: int, text: str) -> bool:
        return used_tokens + estimate_tokens(text) <= self.max_tokens


def estimate_tokens(text: str) -> int:
    """Tokens without a tokenizer: the larger of words·4/3 and characters/4 (typical BPE ratios)."""
    return max(1, round(max(len(text.split()) * 4 / 3, len(text) / 4)))


def default_min_similarity(space: Space | None = None) -> float:
    """The relevance threshold a search uses unless told otherwise: ``DSONET_MIN_SIMILARITY``
    when set, else the threshold calibrated for ``space`` (a `Profile`, an encoder, or an encoder
    id; None: the default profile's), else the protocol's 0.6 for a space never calibrated."""
    value = env_min_similarity()
    if value is not None:
        return value
    encoder_id = _default_encoder_id() if space is None else _encoder_id(space)
    entry = calibrations().get(encoder_id)
    return MIN_SIMILARITY if entry is None else float(entry["min_similarity"])


def env_min_similarity() -> float | None:
    """``DSONET_MIN_SIMILARITY`` as a cosine, None when unset: a threshold given, as ``--min-similarity`` is."""
    raw = os.environ.get(ENV_MIN_SIMILARITY, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not -1.0 <= value <= 1.0:
        raise PolicyError(f"{ENV_MIN_SIMILARITY}: {raw!r} is not a cosine in [-1, 1]; set it to e.g. 0.4, "
                          "or unset it to use the space's calibrated threshold")
    return value


def _encoder_id(space: Space) -> str:
    if isinstance(space, str):
        return space
    return space.encoder_id if isinstance(space, Profile) else space.id


@lru_cache(maxsize=1)
def calibrations() -> dict[str, dict]:
    """encoder (or second stage) id -> the calibration (`relevance.json`, `rescore.json`) shipped
    beside each head and backbone in the package."""
    out = {}
    for head in resources.files("dsonet.encoders").joinpath("weights").iterdir():
        for name in (CALIBRATION_NAME, RESCORE_NAME):
            path = head.joinpath(name)
            if path.is_file():
                entry = json.loads(path.read_text())
                out[entry["encoder_id"]] = entry
    return out


def calibrated(space_id: str) -> bool:
    """Whether a threshold was calibrated for this space or second stage."""
    return space_id in calibrations()


def _default_encoder_id() -> str | None:
    # the default head's calibration names the default space, so its id needs no model load
    path = resources.files("dsonet.encoders").joinpath("weights", DEFAULT_HEAD, CALIBRATION_NAME)
    return json.loads(path.read_text())["encoder_id"] if path.is_file() else None
