"""The learner's settings (`dsonet.learn.grpo.Learner`), one dataclass with a comment on each default,
checked once when made."""

from __future__ import annotations

from dataclasses import dataclass, field

from dsonet.learn.context import Retrieval
from dsonet.learn.run_dir import LearnError


@dataclass(frozen=True)
class LearnConfig:
    group_size: int = 5  # G rollouts per query (Training-free GRPO; the federated paper uses 4)
    temperature: float = 0.7  # rollout temperature (paper)
    max_tokens: int = 128  # per rollout; keep small on CPU
    epochs: int = 3  # passes over the training queries (paper: 3)
    batch_size: int = 8  # queries per library update
    max_lessons: int = 2  # proposals per mixed group
    candidates: int = 1  # advantage replies per mixed group: 1 greedy, or that many sampled at `temperature`,
    # of which the gate keeps the one that does best on validation (a small reflector is a proposer to select from)
    gate_items: int = 0  # 0: gate on the whole validation slice; N: on the N validation items nearest the lesson
    # (where retrieval would inject it) plus N // 2 others drawn at random (harm elsewhere); needs an encoder
    all_failed: bool = False  # also reflect on groups where every attempt failed, against the reference: where
    # running the code explains each failure (an error line), a group that never passed still shows what to change
    rule_lessons: bool = False  # code groups: also propose the lesson an error line spells out beside the reference,
    # or where it names nothing the reference alone (`learn.code_lessons`), a candidate the gate judges like the reflector's
    rule_first: bool = False  # with rule_lessons: ask the reflector only where the error line spells out no lesson.
    # In the drift pilot the lessons that fixed held-out tasks were the error line's; the 1.5B's were wrong or idle
    # ("use integrate.quad", "u.reshape(-1)") and cost about a minute a group on two cores
    repair_check: bool = False  # with rule_lessons: make the swap an error line's lesson advises in the attempt it
    # came from and run it (`code_lessons.repair`); a lesson whose swap passes fixed that instance by execution and
    # needs only to tie at the gate. On three gate items the 0.5B follows a correct lesson too rarely to show a gain
    # (`dso bench gate`: 14 of 72 hand-checked correct lessons kept); what no attempt verified still needs gate_gain
    gate_gain: float = 0.0  # validation accuracy a lesson must add over max(without, neutral text): 0 admits ties;
    # above 0, only lessons that fix something (on tasks where lessons are facts, a tie is a lesson that did nothing)
    probation: bool = False  # a lesson that ties at the gate (no harm, no gain shown) is added on probation
    # (`episodes.PROBATION` confidence) instead of dropped, for outcomes to settle: on two or three gate items the
    # 0.5B follows a correct lesson too rarely to show a gain, and a tie is what a correct lesson it ignored scores
    summary_words: int = 30  # rollouts longer than this are summarised by the LLM; shorter ones are their own
    note_tokens: int = 96  # budget of each summary and advantage reply
    update_tokens: int = 256  # budget of the batch-update reply
    retrieval: Retrieval = field(default_factory=Retrieval)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("group_size", "epochs", "batch_size", "max_lessons", "max_tokens", "note_tokens", "update_tokens",
                     "candidates"):
            if getattr(self, name) < 1:
                raise LearnError(f"{name}: {getattr(self, name)}; must be at least 1")
        if self.group_size < 2:
            raise LearnError(f"group_size: {self.group_size}; a group needs at least 2 rollouts to compare")
        if self.gate_items < 0:
            raise LearnError(f"gate_items: {self.gate_items}; use 0 for the whole validation slice or a positive count")
