"""A learner's run directory: log.jsonl (every rollout, reward, summary, proposal, rejection, operation
and gate decision, one JSON object a line) and state.json (the next step and the counts so far, written
after each step, so that an interrupted run resumes there). Without a directory a run keeps neither.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dsonet.errors import DsoError


class LearnError(DsoError, ValueError):
    """A run directory that belongs to a different run, or bad learner settings."""


@dataclass
class Stats:
    batches: int = 0
    rollouts: int = 0
    reward_sum: float = 0.0
    groups: int = 0
    mixed_groups: int = 0
    proposals: int = 0
    skipped: int = 0  # malformed or rejected LLM outputs (each logged with its reason)
    gated_out: int = 0  # candidates the validation gate refused
    on_probation: int = 0  # candidates that tied at the gate, added on probation (`LearnConfig.probation`)
    operations: dict = field(default_factory=lambda: {"ADD": 0, "UPDATE": 0, "DELETE": 0, "NONE": 0})
    validation: list = field(default_factory=list)  # validation accuracy after each epoch (index 0: no lessons)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.rollouts if self.rollouts else 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Resume:
    """Where a run goes on: the next step, the counts so far, and per epoch the lessons it added."""

    next: int = 0
    stats: Stats | None = None
    added: dict[int, list[str]] = field(default_factory=dict)


class RunDir:
    """``identity`` (of `resume` and `save`): the settings a run is known by (prompts, config, reflector,
    task set); a directory that holds a run of other settings is refused rather than resumed."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None

    def log(self, kind: str, **record) -> None:
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            with open(self.path / "log.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps({"type": kind, **record}) + "\n")

    def resume(self, identity: dict) -> Resume:
        if self.path is None:
            return Resume()
        self.path.mkdir(parents=True, exist_ok=True)
        if not (self.path / "state.json").exists():
            return Resume()
        state = json.loads((self.path / "state.json").read_text())
        theirs = {k: state.get(k) for k in identity}
        if json.loads(json.dumps(identity)) != theirs:
            raise LearnError(f"run_dir: {self.path} holds a run with other settings ({theirs}); "
                             "use a new --run-dir to start afresh, or repeat that run's settings to resume it")
        s = state["stats"]
        return Resume(int(state["next"]), Stats(**{**s, "operations": dict(s["operations"])}),
                      {int(k): v for k, v in state.get("added", {}).items()})

    def save(self, identity: dict, next_batch: int, stats: Stats, added: dict) -> None:
        if self.path is None:
            return
        state = {**identity, "next": next_batch, "stats": asdict(stats), "added": added}
        tmp = self.path / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.path / "state.json")  # atomic: a crash leaves the old or the new state
