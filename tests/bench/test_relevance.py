"""`dso bench relevance`: the pure parts of the calibration (injection, the choice of threshold, a
second stage) do what the report says."""

import numpy as np

from dsonet.bench.relevance import choose, injection, rescored


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
