"""The labelled (question, lesson) pairs `dso bench relevance` calibrates on, how a pair is judged,
and the split by lesson.

**The data** (`build_pairs`, kept in the repo as ``data/relevance_pairs.json``): lessons and
questions, each question naming the lessons that help it. The reasoning families' questions with
their family's reference lesson (`dsonet.learn.tasks.FAMILIES`); GSM8K questions with topic lessons
picked by a pattern (``data/gsm8k_topics.toml``); everyday agent questions with hand-written
lessons (``data/agent_topics.toml``); the `drift` family's instances with their fact's lesson
(`dsonet.learn.drift`). A lesson is unrelated to a question from another area (`judge`); lessons
of the question's own area, of an area declared near it (``near`` in agent_topics.toml: dates and
data, CI and packaging...) or, for GSM8K, any math lesson are left unjudged: they may help. The
README's examples are not in it: they are the test.

**The split** (`split`): half of each source's lessons (and their questions) calibrate, the other
half is held out, so the held-out numbers are on lessons the choice never saw.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from dsonet.data import gsm8k
from dsonet.learn.drift import FACTS, instances
from dsonet.learn.tasks import FAMILIES, family_tasks

DATA = Path(__file__).parent / "data"
PAIRS = DATA / "relevance_pairs.json"
PER_FAMILY = 20  # questions drawn per reasoning family
PER_TOPIC = 15  # GSM8K questions per topic lesson
PER_FACT = 3  # drift instances per fact


@dataclass(frozen=True)
class Lesson:
    id: str
    text: str
    area: str
    source: str  # families, gsm8k, agent, drift


@dataclass(frozen=True)
class Query:
    text: str
    area: str
    source: str
    relevant: tuple[str, ...]  # ids of the lessons that help it


def _lesson(text: str, area: str, source: str) -> Lesson:
    return Lesson(hashlib.sha256(text.encode()).hexdigest()[:12], text, area, source)


def _family_area(name: str) -> str:
    # families whose lessons share a rule are one area: fraction simplification, gcd and lcm turn on the
    # greatest common divisor; number_format and number_sorting on comparing numbers' full values
    if name in ("fraction_simplification", "gcd", "lcm"):
        return "math.divisibility"
    return "math.comparison" if name in ("number_format", "number_sorting") else f"math.{name}"


def build_pairs(per_family: int = PER_FAMILY, per_topic: int = PER_TOPIC, per_fact: int = PER_FACT,
                seed: int = 0) -> dict:
    """The labelled data: {"lessons", "queries", "near"}, the same for the same arguments."""
    lessons, queries = [], []
    for name, family in sorted(FAMILIES.items()):
        if not family.reference:
            continue
        lesson = _lesson(family.reference, _family_area(name), "families")
        lessons.append(lesson)
        seen = []
        for task in family_tasks(name, size=3 * per_family, seed=seed).tasks:
            if task.question not in seen:
                seen.append(task.question)
        queries += [Query(q, lesson.area, "families", (lesson.id,)) for q in seen[:per_family]]
    topics = tomllib.loads((DATA / "gsm8k_topics.toml").read_text())["lesson"]
    patterns = [(_lesson(t["text"], "math.gsm8k", "gsm8k"), re.compile(t["pattern"], re.I)) for t in topics]
    lessons += [lesson for lesson, _ in patterns]
    taken: dict[str, int] = {}
    for item in gsm8k():
        matched = tuple(lesson.id for lesson, pattern in patterns if pattern.search(item.question))
        if matched and taken.get(matched[0], 0) < per_topic:
            taken[matched[0]] = taken.get(matched[0], 0) + 1
            queries.append(Query(item.question, "math.gsm8k", "gsm8k", matched))
    agent = tomllib.loads((DATA / "agent_topics.toml").read_text())
    for entry in agent["lesson"]:
        lesson = _lesson(entry["text"], entry["area"], "agent")
        lessons.append(lesson)
        queries += [Query(q, lesson.area, "agent", (lesson.id,)) for q in entry["questions"]]
    for fact in FACTS:  # same-library facts are not judged against each other (one API may touch another)
        lesson = _lesson(fact.lesson, f"drift.{fact.library}", "drift")
        lessons.append(lesson)
        queries += [Query(t.question, lesson.area, "drift", (lesson.id,)) for t in instances(fact, per_fact, seed)]
    return {"lessons": [asdict(lesson) for lesson in lessons], "queries": [asdict(q) for q in queries],
            "near": agent["near"]}


def load_pairs(path: Path = PAIRS) -> tuple[list[Lesson], list[Query], set[frozenset[str]]]:
    """(lessons, queries, pairs of areas declared near each other) from the kept data file."""
    data = json.loads(path.read_text())
    return [Lesson(**lesson) for lesson in data["lessons"]], \
        [Query(q["text"], q["area"], q["source"], tuple(q["relevant"])) for q in data["queries"]], \
        {frozenset(pair) for pair in data["near"]}


def judge(query: Query, lesson: Lesson, near: set[frozenset[str]] = frozenset()) -> int:
    """1: the lesson helps the question; 0: unrelated; -1: not judged (same or near area, or math beside GSM8K)."""
    if lesson.id in query.relevant:
        return 1
    areas = {query.area, lesson.area}
    unjudged = len(areas) == 1 or frozenset(areas) in near or (
        "math.gsm8k" in areas and all(area.startswith("math.") for area in areas))
    return -1 if unjudged else 0


def split(lessons: list[Lesson], queries: list[Query], seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"calibration": (lesson indices, query indices), "held_out": ...}: half of each source's
    lessons each, a question going with the lesson it was written for (its first relevant one)."""
    rng = np.random.default_rng(seed)
    held = set()
    for source in sorted({lesson.source for lesson in lessons}):
        ids = sorted(lesson.id for lesson in lessons if lesson.source == source)
        held.update(ids[i] for i in rng.permutation(len(ids))[: len(ids) // 2])
    return {name: (np.array([i for i, lesson in enumerate(lessons) if (lesson.id in held) == keep]),
                   np.array([i for i, q in enumerate(queries) if (q.relevant[0] in held) == keep]))
            for name, keep in (("calibration", False), ("held_out", True))}
