"""Episodes across runs: one run's refused code beside another run's code that ran for a near task,
on the drift family's own tasks and the shipped MiniLM."""

import numpy as np
import pytest

from dsonet.bench.agent_loop import INSTRUCTION
from dsonet.encoders.minilm_numpy import numpy_minilm
from dsonet.learn import drift
from dsonet.learn.pairing import NEAR, SAME, Pairing, renamed, template

TRAPZ = "AttributeError: module 'numpy' has no attribute 'trapz'"
WRONG = "AssertionError: r = {'ndarray': {'dtype': 'int64', 'shape': [3, 3]}}, expected a different value"


def _tasks(fact_id: str, n: int = 2):
    return drift.instances(drift.FACTS_BY_ID[fact_id], n, seed=0)


def _asked(task) -> str:
    return f"{task.question}\n{INSTRUCTION}"  # what the bench's agent sends as its first user turn


@pytest.fixture(scope="module")
def encode():
    return numpy_minilm().encode


def test_a_runs_refused_call_and_another_runs_call_that_ran_for_the_same_kind_of_task_give_the_rule_lesson(encode):
    first, second = _tasks("numpy-trapz")
    pairing = Pairing(encode)
    assert pairing.add(_asked(first), [(first.entry["stale"], TRAPZ)], []) == []  # nothing ran yet: it waits
    [(episode, lesson)] = pairing.add(_asked(second), [], [second.answer])
    assert (episode.failed, episode.fixed, episode.fixed_task) == (first.entry["stale"], second.answer, _asked(second))
    assert "use np.trapezoid(" in lesson and "refuses np.trapz" in lesson
    # no variable of either task is the lesson's: each is written as a letter
    names = set(drift.re.findall(r"^(\w+) =", first.question + "\n" + second.question, drift.re.MULTILINE))
    assert not {w.strip(",.():") for w in lesson.split()} & {n for n in names if len(n) > 1}
    assert pairing.add(_asked(second), [], [second.answer]) == []  # seen again (a resent history): nothing new
    assert pairing.add(_asked(first), [(first.entry["stale"], TRAPZ)], []) == []  # a failure pairs once


def test_the_failure_pairs_with_code_that_ran_before_it(encode):
    first, second = _tasks("numpy-trapz")
    pairing = Pairing(encode)
    pairing.add(_asked(second), [], [second.answer])
    [(episode, _)] = pairing.add(_asked(first), [(first.entry["stale"], TRAPZ)], [])
    assert episode.fixed == second.answer


def test_tasks_of_another_kind_do_not_pair(encode):
    [trapz], [append] = _tasks("numpy-trapz", 1), _tasks("pandas-append", 1)
    pairing = Pairing(encode)
    pairing.add(_asked(append), [], [append.answer])
    assert pairing.add(_asked(trapz), [(trapz.entry["stale"], TRAPZ)], []) == []


def test_a_near_task_whose_code_that_ran_calls_a_function_spelled_otherwise_teaches_nothing(encode):
    """np.alltrue and np.any: the two tasks' texts differ by a word, and their templates are as near as
    one fact's instances; the replacement keeps no part of the refused name, so no lesson."""
    [alltrue], [sometrue] = _tasks("numpy-alltrue", 1), _tasks("numpy-sometrue", 1)
    vectors = encode([template(_asked(alltrue)), template(_asked(sometrue))])
    assert float(vectors[0] @ vectors[1]) >= NEAR
    pairing = Pairing(encode)
    pairing.add(_asked(sometrue), [], [sometrue.answer])
    error = "AttributeError: module 'numpy' has no attribute 'alltrue'"
    assert pairing.add(_asked(alltrue), [(alltrue.entry["stale"], error)], []) == []
    [alltrue_2] = drift.instances(drift.FACTS_BY_ID["numpy-alltrue"], 2, seed=0)[1:]
    [(_, lesson)] = pairing.add(_asked(alltrue_2), [], [alltrue_2.answer])  # its own kind's np.all: the lesson
    assert "use np.all" in lesson and "refuses np.alltrue" in lesson


def test_the_threshold_holds_the_drift_familys_instances_together_and_its_facts_apart(encode):
    """What `NEAR` says of itself: one fact's instances above it but in few pairs, two facts' tasks
    above it only for np.alltrue and np.sometrue."""
    tasks = [(f.id, _asked(t)) for f in drift.FACTS for t in drift.instances(f, 3, seed=0)]
    vectors = encode([template(t) for _, t in tasks])
    scores = vectors @ vectors.T
    ids = np.array([i for i, _ in tasks])
    same = (ids[:, None] == ids[None, :]) & ~np.eye(len(tasks), dtype=bool)
    assert np.median(scores[same]) > 0.99 and (scores[same] < NEAR).mean() < 0.1
    across = {tuple(sorted((ids[i], ids[j]))) for i, j in zip(*np.where(~same & (scores >= NEAR))) if ids[i] != ids[j]}
    assert across == {("numpy-alltrue", "numpy-sometrue")}


def test_a_wrong_value_beside_code_that_ran_for_the_same_kind_of_task_gives_the_lesson_that_code_spells_out(encode):
    """A wrong value names no fix; where another run's code ran for a task of the same kind almost word for
    word (one fact's instances that differ only in their names and numbers), that code is the reference."""
    first, second = _tasks("scipy-linalg-tril")
    assert float(np.dot(*encode([template(_asked(first)), template(_asked(second))]))) >= SAME
    pairing = Pairing(encode)
    assert pairing.add(_asked(first), [("r = M[:3, :3]", WRONG)], []) == []
    [(episode, lesson)] = pairing.add(_asked(second), [], [second.answer])
    assert (episode.error, episode.fixed) == (WRONG, second.answer)
    # the other task's code in this task's names: its matrix is mat there, M here (one letter: kept as it is)
    assert lesson == ("When computing the lower triangle of the square matrix M (entries above the main diagonal set "
                      "to zero), use np.tril(M).")


def test_a_wrong_value_beside_code_that_ran_for_a_task_only_near_it_teaches_nothing(encode):
    """Two instances of one fact whose texts differ beyond names and numbers (their frames' columns) are near,
    not the same kind: a wrong value is no rule, and the other task's code may not answer this one."""
    first, second = _tasks("pandas-append", 4)[2:]
    score = float(np.dot(*encode([template(_asked(first)), template(_asked(second))])))
    assert NEAR <= score < SAME
    pairing = Pairing(encode)
    pairing.add(_asked(second), [], [second.answer])
    assert pairing.add(_asked(first), [("r = d", "AssertionError: r = {}, expected a different value")], []) == []


def test_code_is_renamed_into_the_other_tasks_names_by_the_order_they_assign_them():
    first, second = _tasks("scipy-linalg-tril")
    assert renamed("r = np.tril(mat) + mat", second.question, first.question) == "r = np.tril(M) + M"
    assert renamed("r = f(mat)", second.question, "Sum the list.") == "r = f(mat)"  # no names to match: as it was


def test_same_holds_no_two_facts_together_and_most_of_a_facts_instances(encode):
    tasks = [(f.id, _asked(t)) for f in drift.FACTS for t in drift.instances(f, 3, seed=0)]
    vectors = encode([template(t) for _, t in tasks])
    scores = vectors @ vectors.T
    ids = np.array([i for i, _ in tasks])
    same = (ids[:, None] == ids[None, :]) & ~np.eye(len(tasks), dtype=bool)
    assert not (scores[~same & (ids[:, None] != ids[None, :])] >= SAME).any()
    assert (scores[same] >= SAME).mean() > 0.6
