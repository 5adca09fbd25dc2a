"""The second stage of a text search: a question against its best candidates, scored again in the
backbone's own space, against the whole lesson and against its "When ..." clause.

Why a second stage: the default space (MiniLM + the Zen head) exists for the wire, and its
cosines between a question and the lesson that helps it overlap the cosines of same-topic
lessons that do not; MiniLM's own 384-dim space separates them better (`dso bench relevance`,
README "The relevance threshold"). A lesson is
"When <condition>, <action>" and a user describes the condition (the symptom, the error), so the
condition alone is matched as well, and the two cosines are averaged: the whole text keeps what
the action says (a question naming the fix), the clause drops the action's words that pull in
same-topic questions it does not answer.

Nothing of it travels: the candidates' texts are in the library, the vectors stay in this
process, and the profile, the codes and the wire are unchanged. Its threshold is calibrated like a
space's (``rescore.json`` beside MiniLM's weights, keyed by this stage's id).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Sequence

import numpy as np

from dsonet.encoders.base import Encoder, OverBackbone

_WHEN = re.compile(r"^\s*when\s+(?P<condition>.+?)[,;:]\s", re.IGNORECASE | re.DOTALL)
CACHE = 4096  # lessons whose two backbone vectors are kept (1.5 KB each at 384 dims)


def when_clause(text: str) -> str:
    """The condition of a "When <condition>, <action>" lesson; the whole text when it has none."""
    match = _WHEN.match(text)
    return match["condition"] if match else text


class BackboneRescorer:
    """Cosine in ``backbone``'s space of the question against each text and against its "When"
    clause, averaged. Lessons' vectors are cached by text, so a warm search encodes only the query."""

    def __init__(self, backbone: Encoder, cache: int = CACHE):
        self.backbone = backbone
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._size = cache

    @property
    def id(self) -> str:
        return f"rescore:{self.backbone.id}:when-mean"

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """(len(texts),) scores in [-1, 1] of ``query`` against each text."""
        if not texts:
            return np.zeros(0, np.float32)
        q = self.backbone.encode([query], kind="query")[0]  # (d,)
        return (self._vectors(texts) @ q).mean(1)  # (n, 2, d) @ (d,) -> (n, 2) -> (n,)

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            v = self.backbone.encode(missing + [when_clause(t) for t in missing])  # (2m, d)
            for i, text in enumerate(missing):
                self._cache[text] = np.stack([v[i], v[len(missing) + i]])
        for text in texts:
            self._cache.move_to_end(text)
        out = np.stack([self._cache[t] for t in texts])  # (n, 2, d)
        while len(self._cache) > self._size:
            self._cache.popitem(last=False)
        return out


def backbone_rescorer(encoder: Encoder) -> BackboneRescorer | None:
    """The second stage for ``encoder``: over its backbone when it has one (a Zen head on a
    sentence encoder), else None (an encoder with no backbone is scored in its own space only)."""
    backbone = encoder.backbone if isinstance(encoder, OverBackbone) else None
    return None if backbone is None else BackboneRescorer(backbone)
