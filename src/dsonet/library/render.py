"""Injection into prompts: the experience-ledger template.

A "Learned Experiences" block of numbered experiences sits above the problem. The hits come
from `Library.search`, which has already applied the retrieval policy (k, threshold and token
budget, `dsonet.library.policy`): rendering cuts nothing.
"""

from __future__ import annotations

from dsonet.experience import Experience
from dsonet.library.store import Hit

HEADER = "## Learned Experiences\nStrategies that helped on similar problems before. Use them where they apply.\n"
FOOTER = "\n## Problem\n"


def render(experiences: list[Experience] | list[Hit], problem: str) -> str:
    """The prompt: the experiences block above the problem; just the problem when there are none."""
    exps = [e.experience if isinstance(e, Hit) else e for e in experiences]
    if not exps:
        return problem
    return HEADER + "".join(f"{i}. [{e.domain}] {e.text}\n" for i, e in enumerate(exps, 1)) + FOOTER + problem
