"""Every prompt the learner sends, in one versioned place.

PROMPTS_VERSION goes into each run's state file and log, so a resumed run never mixes
prompts, and experiences can be traced to the prompts that produced them. The prompts are
short and ask for one simple shape (lines starting "When", or one JSON object) because the
embedded default model has 135M parameters; larger models follow them just as well.
"""

from __future__ import annotations

PROMPTS_VERSION = "3"

SUMMARISE = """Summarise this attempt in at most two sentences: the method it used and where it went right or wrong.

Problem: {problem}
Attempt: {attempt}
Score: {reward}

Summary:"""

COMPARE = """Two attempts at the same problem. The first scored higher than the second.

Problem: {problem}
Better attempt (score {best_reward}): {best}
Worse attempt (score {worst_reward}): {worst}

What made the better attempt succeed? Write at most {max_lessons} general lessons for similar problems, one per line, each under 30 words, in the form:
When <situation>, <what to do>."""

# A concrete example lesson in COMPARE was copied verbatim by SmolLM2 under greedy decoding
# (prompts v2); the template form is echoed too, but the parser strips the echo and keeps
# the lesson that follows it.

OPERATION = """You maintain a list of short lessons. A new lesson was proposed.

Existing lessons:
{existing}

New lesson: {proposal}

Choose one operation and reply with one JSON object:
{{"op": "ADD"}} if the new lesson is different from all existing ones,
{{"op": "UPDATE", "id": "E1", "text": "<merged lesson>"}} to merge it into a similar lesson,
{{"op": "DELETE", "id": "E1"}} if an existing lesson is wrong,
{{"op": "NONE"}} if the new lesson adds nothing.

JSON:"""
