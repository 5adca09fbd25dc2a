"""`dso bench relevance`'s users' set: the data holds what the bench says, the figures count what
an agent gets, and the real `Library.search` is what the bench's second-stage curve scores."""

import tomllib

import numpy as np
import pytest

from dsonet.bench import relevance_users as ru
from dsonet.bench.relevance import README_TEXTS
from dsonet.encoders import default_encoder
from dsonet.learn.drift import FACTS
from dsonet.library.policy import default_min_similarity

RAW = tomllib.loads(ru.USERS.read_text())["lesson"]


def test_the_set_holds_at_least_300_pairs_in_four_families_split_by_lesson():
    lessons = ru.load_users()
    pairs = sum(len(lesson.questions) + len(lesson.negatives) for lesson in lessons)
    assert pairs >= 300 and all(len(lesson.negatives) >= 1 for lesson in lessons)
    for half in ru.HALVES:
        families = {lesson.family for lesson in lessons if lesson.split == half}
        assert families == {"coding", "data", "operations", "drift"}
    assert abs(sum(lesson.split == "tune" for lesson in lessons) - len(lessons) / 2) <= 1


def test_every_question_is_written_once_and_none_is_the_readmes():
    texts = [q for lesson in ru.load_users() for q in (*lesson.questions, *lesson.negatives)]
    assert len(texts) == len(set(texts)) and not set(texts) & set(README_TEXTS)


def test_the_drift_lessons_are_the_drift_familys_own():
    by_id = {fact.id: fact.lesson for fact in FACTS}
    drift = [entry for entry in RAW if entry["family"] == "drift"]
    assert len(drift) >= 10 and all(by_id[entry["fact"]] == entry["text"] for entry in drift)


def test_injection_counts_precision_on_answerable_questions_and_silence_on_hard_negatives():
    scores = np.array([[0.9, 0.6, 0.1],   # q0 (lesson 0): 0 and 1 injected at 0.5
                       [0.2, 0.4, 0.8],   # q1 (lesson 1): only 2, the wrong one
                       [0.7, 0.1, 0.1],   # a hard negative that gets lesson 0
                       [0.3, 0.2, 0.1]])  # a hard negative that gets nothing
    gold = np.array([0, 1, -1, -1])
    at = ru.injection(scores, gold, 0.5, k=2)
    assert (at["precision"], at["recall"], at["silent"], at["injected"]) == (0.3333, 0.5, 0.5, 3)


def test_the_chosen_threshold_keeps_both_targets_from_there_up():
    points = [(0.4, 0.97, 0.7), (0.5, 0.96, 0.92), (0.6, 0.94, 0.95), (0.7, 0.98, 0.97), (0.8, 1.0, 1.0)]
    curve = [{"threshold": t, "precision": p, "silent": s} for t, p, s in points]
    assert ru.choose(curve, 0.95, 0.9) == 0.7  # 0.5 passes both, but precision dips at 0.6
    assert ru.choose(curve[:1], 0.95, 0.9) is None


@pytest.fixture(scope="module")
def half():
    lessons = [lesson for lesson in ru.load_users() if lesson.split == "held_out"][:6]
    return ru.score_half(lessons, default_encoder())


def test_the_second_stages_curve_scores_what_library_search_returns(half):
    threshold = default_min_similarity(ru.BackboneRescorer(default_encoder().backbone).id)
    from_curve = ru.injection(half["scores"]["rescored"], half["gold"], threshold)
    assert ru.searched_figures(half, threshold) == from_curve


def test_the_first_stage_scores_every_lesson_and_the_second_only_its_candidates(half):
    n = len(set(half["gold"][half["gold"] >= 0].tolist()))
    assert (half["scores"]["default"] > ru.MISSING).sum(1).tolist() == [n] * len(half["gold"])
    assert ((half["scores"]["rescored"] > ru.MISSING).sum(1) <= ru.CANDIDATES).all()


def test_the_report_and_the_table_show_each_scorings_held_out_figures():
    gold = np.array([0, 1, -1])
    scores = {"default": np.array([[0.9, 0.2], [0.3, 0.8], [0.6, 0.1]]),
              "rescored": np.array([[0.8, 0.1], [0.2, 0.7], [0.4, 0.2]])}
    halves = {h: {"gold": gold, "scores": scores, "searched": [[0], [1], []]} for h in ru.HALVES}
    result = {"data": "x.toml", "target_precision": 0.95, "target_silent": 0.9,
              "halves": {h: {"lessons": 2, "questions": 2, "hard_negatives": 1} for h in ru.HALVES},
              "scorings": ru.compare(halves, 0.95, 0.9, {"default": 0.5, "rescored": 0.5}),
              "search": {h: ru.searched_figures(halves[h], 0.5) for h in ru.HALVES},
              "cold": [{"setup": "both stages", "median_s": 1.2, "min_s": 1.1, "peak_rss_mb": 300.0, "runs": 3}]}
    assert result["scorings"]["rescored"]["at_default"]["held_out"]["silent"] == 1.0  # 0.4 < 0.5
    assert result["scorings"]["default"]["at_default"]["held_out"]["silent"] == 0.0  # 0.6 ≥ 0.5
    assert result["scorings"]["default"]["chosen_on_tune"] == 0.605  # just above the hard negative's 0.6
    lines = "\n".join(ru.report_lines(result))
    assert "| rescored | 0.5 (default) | 1.000 | 1.000 | 1.000 |" in lines and "| both stages | 1.2 |" in lines
    assert "Library.search" in ru.table(result)
