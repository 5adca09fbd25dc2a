"""`dso bench relevance`: the kept labelled data is what its generator writes, and the pure parts
(judging, splitting by lesson, injection, the choice of threshold) do what the report says."""

import json

import numpy as np

from dsonet.bench.relevance import (PAIRS, Lesson, Query, build_pairs, choose, injection, judge, load_pairs, rescored,
                                    split)


def test_the_kept_pairs_are_what_the_generator_writes():
    # editing a topic file or a family's lesson without `dso bench relevance --rebuild-pairs` fails here
    assert json.loads(json.dumps(build_pairs())) == json.loads(PAIRS.read_text())


def test_a_question_is_judged_against_other_areas_only_and_never_against_near_ones():
    git = Lesson("g", "When a merge conflicts...", "git", "agent")
    dates = Lesson("d", "When storing timestamps...", "dates", "agent")
    data = Lesson("c", "When a CSV...", "data", "agent")
    q = Query("Date column is loaded as plain strings", "data", "agent", ("c",))
    near = {frozenset({"dates", "data"})}
    assert [judge(q, lesson, near) for lesson in (data, git, dates)] == [1, 0, -1]
    gsm = Query("Janet sells 16 eggs...", "math.gsm8k", "gsm8k", ())
    assert judge(gsm, Lesson("f", "When simplifying...", "math.divisibility", "families")) == -1


def test_the_split_is_by_lesson_so_held_out_questions_meet_lessons_never_calibrated_on():
    lessons, queries, _ = load_pairs()
    (cl, cq), (hl, hq) = split(lessons, queries, seed=3).values()
    assert not set(cl) & set(hl) and len(cl) + len(hl) == len(lessons)
    held = {lessons[i].id for i in hl}
    assert all(queries[i].relevant[0] in held for i in hq) and not any(queries[i].relevant[0] in held for i in cq)


def test_injection_counts_the_top_k_above_the_threshold_and_skips_unjudged_lessons():
    scores = np.array([[0.9, 0.8, 0.7, 0.2], [0.6, 0.1, 0.5, 0.4]])
    labels = np.array([[1, -1, 0, 0], [0, 1, 1, 0]], np.int8)
    at = injection(scores, labels, 0.45, k=2)  # q0: 0.9 (helps), 0.8 (unjudged); q1: 0.6 (unrelated), 0.5 (helps)
    assert (at["precision"], at["recall"], at["unjudged_injected"]) == (2 / 3, 2 / 3, 1)


def test_the_chosen_threshold_is_the_lowest_whose_precision_holds_from_there_up():
    points = [(0.3, 0.7), (0.4, 0.92), (0.5, 0.88), (0.6, 0.95), (0.7, 1.0)]
    curve = [{"threshold": t, "precision": p} for t, p in points]
    assert choose(curve, 0.9) == 0.6  # 0.4 passes, but precision dips under 0.9 again at 0.5


def test_a_second_stage_rescores_only_the_first_stages_candidates():
    first = np.array([[0.9, 0.1, 0.5, 0.3]])
    second = np.array([[0.2, 0.8, 0.6, 0.7]])
    assert rescored(first, second, n=2).tolist() == [[0.2, -1.0, 0.6, -1.0]]  # lesson 1 never reached the stage
