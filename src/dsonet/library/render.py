"""Injection into prompts: the experience-ledger template.

A "Learned Experiences" block of numbered experiences sits above the problem. Experiences are
added best first and the block stops before it would pass ``max_tokens``, counted with the
LLM's own tokenizer when one is given (anything with ``encode(text) -> list``), else estimated.
"""

from __future__ import annotations

from dsonet.experience import Experience
from dsonet.library.store import Hit, estimate_tokens

HEADER = "## Learned Experiences\nStrategies that helped on similar problems before. Use them where they apply.\n"
FOOTER = "\n## Problem\n"


def count_tokens(text: str, tokenizer=None) -> int:
    if tokenizer is None:
        return estimate_tokens(text)
    try:  # Hugging Face tokenizers would add BOS/EOS to every line otherwise
        return len(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:
        return len(tokenizer.encode(text))


def render(experiences: list[Experience] | list[Hit], problem: str, tokenizer=None, max_tokens: int = 2048) -> str:
    """The prompt: the experiences block (within max_tokens) above the problem; just the problem if none fit."""
    exps = [e.experience if isinstance(e, Hit) else e for e in experiences]
    lines, used = [], count_tokens(HEADER, tokenizer)
    for i, exp in enumerate(exps, 1):
        line = f"{i}. [{exp.domain}] {exp.text}\n"
        cost = count_tokens(line, tokenizer)
        if used + cost > max_tokens:
            break
        lines.append(line)
        used += cost
    if not lines:
        return problem
    return HEADER + "".join(lines) + FOOTER + problem
