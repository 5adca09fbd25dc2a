"""The second stage of a text search: MiniLM's own cosine against the lesson and its "When"
clause, averaged, with the lessons' vectors cached by text."""

import numpy as np
import pytest

from dsonet.encoders.rescore import BackboneRescorer, backbone_rescorer, when_clause


class Bag:
    """A backbone that counts what it encodes: a text's vector is its bag of known words."""
    id = "bag"
    dim = 4
    WORDS = ("docker", "cache", "slow", "build")

    def __init__(self):
        self.encoded: list[str] = []

    def encode(self, texts, kind="document"):
        self.encoded += list(texts)
        v = np.array([[t.lower().count(w) for w in self.WORDS] for t in texts], np.float32) + 1e-3
        return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("text, clause", [
    ("When a docker build is slow, cache the layers.", "a docker build is slow"),
    ("when X fails; do Y", "X fails"),
    ("Always pin versions.", "Always pin versions."),  # no clause: the whole text
])
def test_the_when_clause_is_the_condition_before_the_first_comma(text, clause):
    assert when_clause(text) == clause


def test_a_score_is_the_mean_of_the_cosines_to_the_lesson_and_to_its_clause():
    bag = Bag()
    lesson = "When a build is slow, use the docker cache."
    score = BackboneRescorer(bag).score("slow build", [lesson])
    q, whole, clause = bag.encode(["slow build", lesson, "a build is slow"])
    assert score.shape == (1,) and score[0] == pytest.approx((q @ whole + q @ clause) / 2, abs=1e-6)


def test_a_lesson_is_encoded_once_and_the_query_every_time():
    bag = Bag()
    stage = BackboneRescorer(bag)
    lessons = ["When a build is slow, use the docker cache.", "When docker is slow, prune."]
    first = stage.score("slow build", lessons)
    bag.encoded.clear()
    again = stage.score("slow build", lessons[::-1])
    assert bag.encoded == ["slow build"] and again.tolist() == first[::-1].tolist()


def test_the_cache_keeps_at_most_its_size():
    stage = BackboneRescorer(Bag(), cache=2)
    stage.score("q", ["When a, b.", "When c, d.", "When e, f."])
    assert len(stage._cache) == 2


def test_an_empty_candidate_list_scores_nothing():
    assert BackboneRescorer(Bag()).score("q", []).shape == (0,)


def test_only_an_encoder_with_a_backbone_gets_a_second_stage():
    class Zen:
        backbone = Bag()

    assert backbone_rescorer(Bag()) is None
    assert backbone_rescorer(Zen()).id == "rescore:bag:when-mean"
