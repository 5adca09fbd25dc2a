"""Every prompt the learner sends, in one versioned place.

PROMPTS_VERSION goes into each run's state file and log and into the bench's answer cache
keys, so a resumed run never mixes prompts, and experiences can be traced to the prompts that
produced them. The three steps follow Training-free GRPO (youtu-agent `utu/practice/`):
summarise each rollout with the reference answer in view; extract the group's semantic
advantage from all G summaries (for code that was run, `ADVANTAGE_CODE`: each attempt with what running
it showed, and the reference code); then one batch of ADD / UPDATE / DELETE / NONE operations
against the domain's library per step.
"""

from __future__ import annotations

PROMPTS_VERSION = "6"

SUMMARISE = """Here is one attempt at a problem, the correct answer, and the attempt's score.

Problem: {problem}
Correct answer: {reference}
Attempt: {attempt}
Score: {reward}

In one or two sentences, say what the attempt did and, compared with the correct answer, where it went right or wrong. Summary:"""

ADVANTAGE = """Several attempts at the same problem were scored against the correct answer.

Problem: {problem}
Correct answer: {reference}

Attempts:
{summaries}

Compare the attempts that scored higher with those that scored lower. What general mistake or good habit do they show? Write at most {max_lessons} lessons that would help on a different problem of the same kind, one per line, each at most 32 words, each of the form:
When <kind of problem or situation>, <what to do>.
Name the kind of problem, never this problem's letters, words, numbers or answer."""

UPDATE = """You keep a short list of lessons for solving problems of one kind.

Current lessons:
{existing}

Candidate lessons from new practice:
{candidates}

For each candidate choose one operation: ADD it as a new lesson; UPDATE an existing lesson (give its id and the merged text, at most 32 words, starting "When"); DELETE an existing lesson the candidate shows to be wrong (give its id); or NONE if the candidate adds nothing.
Reply with one JSON list, one object per candidate, for example:
[{{"candidate": "C1", "op": "ADD"}}, {{"candidate": "C2", "op": "UPDATE", "id": "E1", "text": "When ..., ..."}}]
JSON:"""

# Code that was run: what each attempt did is its code and what running it showed (an error's last
# line or the value it computed), so there is nothing to summarise; the lesson is about the libraries
# installed where the code ran, which the model cannot know from its training.
ADVANTAGE_CODE = """Several attempts at the same Python task were run in this environment and checked against a reference solution.

Task: {problem}
Reference solution: {reference}

Attempts (code -> what running it showed):
{summaries}

The reference solution works in this environment; each failed attempt shows what this environment refuses or answers differently. Write at most {max_lessons} lessons that would help on a different task using the same library function, one per line, each at most 32 words, of the form "When <what the task does> with <library>, use <what the reference calls or passes>; <what the failed attempts used> <fails how>." For example, about another library:
{example}
Name the library and its functions; never this task's variable names or data."""

# The shape of a lesson about an environment, shown to the reflector; never kept as a lesson itself.
CODE_EXAMPLE = "When reading a JSON file with the json module, call json.load(f); json.read does not exist."
