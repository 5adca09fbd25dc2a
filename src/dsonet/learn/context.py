"""Retrieval and injection: the experiences a prompt carries (experience-ledger paper's rule).

k = 5 experiences at similarity > 0.6, at most 2048 tokens of them, rendered by the library
under a "Learned Experiences" heading above the problem. The search runs on the bare
question, not on the answer-format instruction every prompt of a task set shares.
"""

from __future__ import annotations

from dsonet.library.policy import K, MIN_SIMILARITY
from dsonet.library.policy import MAX_TOKENS as CONTEXT_TOKENS
from dsonet.library.policy import RetrievalPolicy as Retrieval  # one policy object, defined by the library

__all__ = ["CONTEXT_TOKENS", "K", "MIN_SIMILARITY", "Retrieval", "with_experiences"]


def with_experiences(store, query: str, problem: str, retrieval: Retrieval = Retrieval(),
                     tokenizer=None) -> tuple[str, list]:
    """(prompt, hits): ``problem`` with the experiences retrieved for ``query`` injected above it."""
    if store is None:
        return problem, []
    hits = store.search(query, k=retrieval.k, min_similarity=retrieval.min_similarity,
                        max_tokens=retrieval.max_tokens)
    if not hits:
        return problem, []
    from dsonet.library import render

    return render(hits, problem), hits
