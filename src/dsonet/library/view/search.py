"""A search by vector, end to end: the tags it is limited to, the first stage over the codes (the
index's ranking, read as merged hits), in the asker's environment where one is given
(`dsonet.library.view.scoped`), and the second stage over the texts where a threshold was calibrated
for it (`dsonet.library.index.rescored`)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from dsonet.codec.profile import Profile
from dsonet.library.errors import LibraryError
from dsonet.library.hits import Hits
from dsonet.library.index.rescored import CANDIDATES, Rescorer, rescored
from dsonet.library.index.row_index import RowIndex
from dsonet.library.policy import RetrievalPolicy, default_min_similarity, env_min_similarity
from dsonet.library.store import tags as tags_table
from dsonet.library.store.rows import RowStore
from dsonet.library.view.merged_hits import MergedHits
from dsonet.library.view.scoped import ScopedLessons
from dsonet.scope import Scope


class Search:
    def __init__(self, rows: RowStore, index: RowIndex, merged_hits: MergedHits, scoped: ScopedLessons,
                 profile: Profile, rescorer: Callable[[], Rescorer | None]):
        """``rescorer``: the second stage, asked for only when a search can use one (building it may
        load the encoder's backbone)."""
        self.rows, self.index, self.merged_hits, self.scoped = rows, index, merged_hits, scoped
        self.profile, self.rescorer = profile, rescorer

    def __call__(self, q: np.ndarray, k: int, min_similarity: float | None, domain: str | None, max_tokens: int,
                 tags: tuple[str, ...], environment: Scope | None, text: str | None) -> Hits:
        """`dsonet.library.Library.search_vector`."""
        if min_similarity is None:
            min_similarity = env_min_similarity()  # given in the environment: as explicit as an argument
        stage = self.rescorer() if text is not None and min_similarity is None else None
        if stage is not None:
            candidates = self(q, max(k, CANDIDATES), -1.0, domain, 10**9, tags, environment, None)
            policy = RetrievalPolicy(k, default_min_similarity(stage.id), max_tokens)
            hits = rescored(candidates, stage.score(text, [h.experience.text for h in candidates]), policy)
            hits.sort(key=lambda h: h.fit == "unknown")  # stable: the fitting first, each part by its score
            hits.environment, hits.held_back = candidates.environment, candidates.held_back
            return hits
        policy = RetrievalPolicy(k, min_similarity, max_tokens).resolved(self.profile)
        scopes = tags_table.checked(tags)
        within = tags_table.ids_with(self.rows.db, scopes) if scopes else None
        q = np.asarray(q, np.float32).reshape(-1)
        if q.shape != (self.profile.dim,) or not np.isfinite(q).all():
            raise LibraryError(f"q: shape {q.shape} (finite values expected), expected ({self.profile.dim},)")
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        if environment is not None:
            return self.scoped.search_in(q, policy, domain, within, environment)
        rows, scores = self.index.rank(q, policy.k, domain, within)
        return self.merged_hits.walk(q, rows, scores, policy)
