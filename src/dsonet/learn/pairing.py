"""Episodes across runs: one run's refused code beside another run's code that ran for a near task.

A small model seldom repairs its own error inside a run: the 0.5B wrote ``np.trapz`` again on each
of its three tries. But the agents behind one proxy work through many near tasks, and what one run
never fixed another may have written right on its first try. A run's failure and another run's code
that ran for a task of the same kind are the group's worst and best rollouts (the seeds' comparison
within one query, near tasks standing for the query), with the environment as the reward: the pair is
an `Episode` whose ``fixed`` code comes from the other run (``fixed_task``). Nobody can re-run the
pair in the caller's environment, and two near tasks may want different functions (np.alltrue and
np.any answer tasks whose texts differ by one word), so what it teaches depends on how near the tasks are:

- near (``NEAR``): only the rule lesson its error line spells out beside that code (`episodes.lesson`),
  where the replacement keeps a part of the refused name's spelling (`code_lessons.akin`: np.trapz ->
  np.trapezoid);
- the same kind almost word for word (``SAME``): the rule lesson whatever the replacement's spelling
  (DataFrame.append -> pd.concat), and where the error names no fix (a wrong value, a name the code
  that ran does not replace), the lesson the code that ran spells out as a reference would
  (`episodes.lesson_from_code`: "When computing the lower triangle of ..., use np.tril(x)."). Such a
  failure is what a small model's run seldom fixes and a larger agent's run on the same kind of task
  gets right at once: the fleet's rollouts of one query.

Tasks are compared with their variables and numbers written alike (`template`): two instances of one
kind of task then read as one text, whatever each caller named its arrays.

Only the runs one learner sees are paired. Their code and tasks hold the callers' data and stay at
the proxy; what travels to the fleet is the lesson, as for an episode inside one run.

    pairing = Pairing(encode)                      # encode: texts -> L2-normalised rows (MiniLM's)
    pairing.add(task, failed, ran) -> [(Episode, lesson)]   # what these new attempts complete
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from dsonet.learn.code_lessons import assigned, akin
from dsonet.learn.episodes import Episode, lesson, lesson_from_code, remember

# cosine of two task templates' MiniLM embeddings above which the tasks are of one kind: on the drift
# family (4 instances of each of its 89 facts), two instances of one fact score 0.996 at the median and
# under 0.93 in 7% of pairs, and one pair of different facts scores above it (np.alltrue, np.sometrue:
# `akin` keeps their lessons apart)
NEAR = 0.93
# above this, two tasks are one kind almost word for word: 66% of the pairs of one drift fact's instances
# (as the bench's agents ask them), and no pair of two facts (np.alltrue beside np.sometrue: 0.986 at most)
SAME = 0.99
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
SIZE = 2048  # attempts of each kind kept for pairing (oldest forgotten first)


@dataclass(frozen=True)
class _Attempt:
    task: str
    code: str
    error: str | None  # None: it ran


class Pairing:
    """The failures and the code that ran of the runs seen so far, each kept once, by their tasks' embeddings."""

    def __init__(self, encode: Callable[[Sequence[str]], np.ndarray], near: float = NEAR, size: int = SIZE):
        self.encode, self.near, self.size = encode, near, size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()  # task -> its embedding
        self._failed: OrderedDict[_Attempt, bool] = OrderedDict()  # -> still waiting for its pair
        self._ran: OrderedDict[_Attempt, None] = OrderedDict()

    def add(self, task: str, failed: Sequence[tuple[str, str]], ran: Sequence[str]) -> list[tuple[Episode, str]]:
        """This run's ``failed`` attempts ((code, error line)) and the code of it that ``ran``; the
        episodes they complete with the other runs' attempts, each with its lesson: a new failure
        beside the nearest code that ran which explains it, a new piece of code that ran beside each
        waiting failure it explains. Attempts seen before add nothing; a failure pairs once."""
        new_failed = [a for a in (_Attempt(task, c, e) for c, e in failed) if a not in self._failed]
        new_ran = [a for a in (_Attempt(task, c, None) for c in ran) if a not in self._ran]
        if not new_failed and not new_ran:
            return []
        vector = self._vector(task)
        out = []
        for a in new_ran:
            self._keep(self._ran, a)
        for a in new_failed:  # the nearest code that ran and explains it, if any: the failure is then done
            found = self._explained(a, self._near(vector, list(self._ran)))
            self._keep(self._failed, a, found is None)
            out += [found] if found is not None else []
        if new_ran:
            for f in self._near(vector, [f for f, waiting in self._failed.items() if waiting]):
                found = next(filter(None, (self._explained(f, [r]) for r in new_ran)), None)
                if found is not None:
                    self._failed[f] = False
                    out.append(found)
        return out

    def _explained(self, failed: _Attempt, candidates: list[_Attempt]) -> tuple[Episode, str] | None:
        for r in candidates:
            episode = Episode(failed.task, failed.code, failed.error or "", r.code, fixed_task=r.task)
            same = r.task == failed.task or float(self._vector(failed.task) @ self._vector(r.task)) >= SAME
            # one kind of task: the code that ran, in this task's names, so that the lesson's call and task agree
            read = replace(episode, fixed=renamed(r.code, r.task, failed.task)) if same else episode
            text = lesson(read)
            if text is not None and (same or akin(failed.code, episode.error, r.code)):
                return episode, text
            if same and text is None and (text := lesson_from_code(read)) is not None:
                return episode, text
        return None

    def _near(self, vector: np.ndarray, attempts: list[_Attempt]) -> list[_Attempt]:
        """``attempts`` whose task is near ``vector``'s, the nearest first."""
        if not attempts:
            return []
        scores = np.stack([self._vector(a.task) for a in attempts]) @ vector
        order = np.argsort(-scores, kind="stable")
        return [attempts[i] for i in order if scores[i] >= self.near]

    def _vector(self, task: str) -> np.ndarray:
        if task not in self._vectors:
            self._keep(self._vectors, task, np.asarray(self.encode([template(task)]), dtype=np.float32)[0])
        return self._vectors[task]

    def _keep(self, table: OrderedDict, key, value=None) -> None:
        remember(table, key, value, 2 * self.size if table is self._vectors else self.size)  # a task per attempt


def renamed(code: str, source: str, target: str) -> str:
    """``code`` written for task ``source`` in the names of task ``target``, their variables matched in the
    order the tasks assign them (as `template` writes both); unchanged where they assign different counts."""
    theirs, ours = list(dict.fromkeys(assigned(source))), list(dict.fromkeys(assigned(target)))
    if len(theirs) != len(ours):
        return code
    names = dict(zip(theirs, ours))
    return re.sub(r"\b\w+\b", lambda m: names.get(m.group(0), m.group(0)), code)


def template(task: str) -> str:
    """``task`` with the variables it assigns written v0, v1, ... in order and every number written 0."""
    for i, name in enumerate(dict.fromkeys(assigned(task))):
        task = re.sub(rf"\b{re.escape(name)}\b", f"v{i}", task)
    return _NUMBER.sub("0", task)
