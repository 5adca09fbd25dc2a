"""Episodes across runs: one run's refused code beside another run's code that ran for a near task,
on the drift family's own tasks and the shipped MiniLM."""

import numpy as np
import pytest

from dsonet.bench.agent_loop import INSTRUCTION
from dsonet.encoders.minilm_numpy import numpy_minilm
from dsonet.learn import drift
from dsonet.learn.pairing import NEAR, Pairing, template

TRAPZ = "AttributeError: module 'numpy' has no attribute 'trapz'"


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
