"""Task sets and their verifiers: what the learner practises on and how a rollout is scored.

A task set is a list of (question, reference answer) items plus one verifier that maps a
model's response to a reward in [0, 1]. Sources:

* ``gsm8k``                 GSM8K test items from `dsonet.data.gsm8k()`, numeric match;
* ``rg:<name>``             a reasoning-gym generator, scored by the generator's own ``score_answer``
                            on the extracted final answer (e.g. ``rg:chain_sum``);
* ``jsonl:<path>``          a user's own {"question", "answer"} lines, with a chosen verifier
                            (``numeric``, ``exact`` or ``contains``).

Tool telemetry — records of (tool, input, output, reward) an agent logged while working —
gives rewards without a verifier: `telemetry_groups` turns them into the same groups of
scored attempts the learner builds from its own rollouts.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Sequence

from dsonet.errors import DsoError
from dsonet.learn.answers import extract_answer, numbers_match

VerifierName = Literal["numeric", "exact", "contains"]
ANSWER_INSTRUCTION = "Think briefly, then finish with a line 'Answer: <final answer>'."


class TaskError(DsoError, ValueError):
    """A task source that cannot be read, or an unknown task or verifier name."""


@dataclass(frozen=True)
class Task:
    id: str
    question: str
    answer: str
    domain: str
    entry: dict = field(default_factory=dict, compare=False, repr=False)  # a generator's own record


Verifier = Callable[[Task, str], float]


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s.-]", " ", text.casefold()).split()).strip(" .")


def numeric_verifier(task: Task, response: str) -> float:
    return 1.0 if numbers_match(response, task.answer) else 0.0


def exact_verifier(task: Task, response: str) -> float:
    return 1.0 if _norm(extract_answer(response)) == _norm(task.answer) else 0.0


def contains_verifier(task: Task, response: str) -> float:
    return 1.0 if _norm(task.answer) and _norm(task.answer) in _norm(response) else 0.0


VERIFIERS: dict[str, Verifier] = {"numeric": numeric_verifier, "exact": exact_verifier,
                                  "contains": contains_verifier}


@dataclass
class TaskSet:
    name: str
    tasks: list[Task]
    verify: Verifier
    instruction: str = ANSWER_INSTRUCTION

    def prompt(self, task: Task) -> str:
        return f"{task.question}\n{self.instruction}"

    def split(self, held_out: float = 0.2, seed: int = 0) -> tuple["TaskSet", "TaskSet"]:
        """Deterministic (train, held-out) halves sharing this set's verifier."""
        from dsonet.data import split

        train, test = split(self.tasks, held_out=held_out, seed=seed)
        return (TaskSet(self.name, train, self.verify, self.instruction),
                TaskSet(self.name, test, self.verify, self.instruction))


def verifier(name: str) -> Verifier:
    if name not in VERIFIERS:
        raise TaskError(f"verifier: {name!r} is unknown; choose one of {sorted(VERIFIERS)}")
    return VERIFIERS[name]


def gsm8k_tasks(size: int | None = None) -> TaskSet:
    from dsonet.data import gsm8k

    items = gsm8k()[:size]
    tasks = [Task(f"gsm8k-{i}", it.question, it.answer, "math.word_problems") for i, it in enumerate(items)]
    return TaskSet("gsm8k", tasks, numeric_verifier)


def reasoning_gym_tasks(name: str, size: int = 50, seed: int = 0, **config) -> TaskSet:
    """A reasoning-gym generator; ``config`` goes to the generator (e.g. max_terms=3)."""
    import reasoning_gym

    try:
        dataset = reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
    except Exception as exc:  # reasoning-gym raises ValueError/KeyError/TypeError for bad names and configs
        raise TaskError(f"task: reasoning-gym cannot build {name!r} with {config}: {exc}") from exc
    domain = "reasoning." + re.sub(r"[^a-z0-9_]", "_", name.lower())
    tasks = [Task(f"{name}-{seed}-{i}", e["question"], str(e["answer"]), domain, e) for i, e in enumerate(dataset)]

    def verify(task: Task, response: str) -> float:
        return float(dataset.score_answer(extract_answer(response).strip(), task.entry))

    return TaskSet(f"rg:{name}", tasks, verify)


def jsonl_tasks(path: str | Path, verifier_name: VerifierName = "numeric", domain: str = "general") -> TaskSet:
    """A user's own tasks: one {"question": ..., "answer": ...} object per line."""
    path = Path(path)
    if not path.exists():
        raise TaskError(f"tasks: {path} does not exist; pass a JSONL file of question/answer objects")
    tasks = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            tasks.append(Task(str(row.get("id", f"{path.stem}-{no}")), str(row["question"]), str(row["answer"]),
                              str(row.get("domain", domain))))
        except (json.JSONDecodeError, KeyError, AttributeError) as exc:
            raise TaskError(f"{path}:{no}: expected an object with 'question' and 'answer' ({exc})") from exc
    return TaskSet(f"jsonl:{path.name}", tasks, verifier(verifier_name))


def load_tasks(spec: str, size: int | None = None, seed: int = 0, verifier_name: VerifierName = "numeric",
               **config) -> TaskSet:
    """``gsm8k``, ``rg:<generator>`` (or a bare generator name) or ``jsonl:<path>``."""
    if spec == "gsm8k":
        return gsm8k_tasks(size)
    if spec.startswith("jsonl:") or spec.endswith(".jsonl"):
        ts = jsonl_tasks(spec.removeprefix("jsonl:"), verifier_name)
        ts.tasks = ts.tasks[:size]
        return ts
    return reasoning_gym_tasks(spec.removeprefix("rg:"), size=size or 50, seed=seed, **config)


@dataclass(frozen=True)
class Group:
    """G scored attempts at one query: the unit training-free GRPO learns from."""

    query: str
    domain: str
    responses: tuple[str, ...]
    rewards: tuple[float, ...]

    @property
    def mixed(self) -> bool:
        return max(self.rewards) > min(self.rewards)


def telemetry_groups(records: Sequence[dict]) -> list[Group]:
    """Group tool telemetry {tool, input, output, reward} by (tool, input): each group is the
    attempts an agent made at one call, already scored by the tool's outcome."""
    buckets: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for i, rec in enumerate(records):
        missing = {"tool", "input", "output", "reward"} - set(rec)
        if missing:
            raise TaskError(f"telemetry record {i}: missing {sorted(missing)}; each needs tool, input, output, reward")
        buckets[(str(rec["tool"]), str(rec["input"]))].append(rec)
    groups = []
    for (tool, inp), recs in buckets.items():
        domain = "tool." + (re.sub(r"[^a-z0-9_]+", "_", tool.lower()).strip("_") or "unknown")
        groups.append(Group(f"Call the tool '{tool}' with: {inp}", domain, tuple(str(r["output"]) for r in recs),
                            tuple(float(r["reward"]) for r in recs)))
    return groups
