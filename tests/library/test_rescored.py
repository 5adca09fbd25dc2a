"""A text search's second stage: the first stage's best candidates scored again from the texts,
the policy applied to those scores; an explicit threshold or a search by vector is one stage."""

import numpy as np
import pytest

from dsonet.library import Library
from dsonet.library.hits import Hit, Hits
from dsonet.library.policy import ENV_MIN_SIMILARITY, MIN_SIMILARITY, RetrievalPolicy
from dsonet.library.index.rescored import CANDIDATES, rescored
from lib_helpers import HashEncoder

LESSONS = [f"When case {i} happens, do step {i}." for i in range(30)]


class Fixed:
    """A second stage that scores lesson i at ``scores[i]`` and records what it was shown."""
    id = "test:fixed"

    def __init__(self, scores: dict[str, float]):
        self.scores, self.shown = scores, []

    def score(self, query, texts):
        self.shown.append(list(texts))
        return np.array([self.scores.get(t, 0.0) for t in texts], np.float32)


@pytest.fixture(autouse=True)
def no_override(monkeypatch):
    monkeypatch.delenv(ENV_MIN_SIMILARITY, raising=False)


@pytest.fixture
def library(tmp_path):
    stage = Fixed({LESSONS[1]: 0.9, LESSONS[2]: 0.7, LESSONS[3]: 0.5})
    lib = filled(tmp_path, stage, LESSONS[:CANDIDATES])  # the second stage sees them all
    yield lib, stage
    lib.close()


def filled(tmp_path, stage, lessons) -> Library:
    lib = Library(tmp_path / "lib.sqlite", encoder=HashEncoder(), rescore=stage)
    for i, text in enumerate(lessons):
        lib.add(text, domain=f"d{i}")  # one domain each: none merges with another
    return lib


def test_a_text_search_ranks_and_cuts_by_the_second_stages_scores(library):
    lib, stage = library
    hits = lib.search("anything")
    assert [(h.experience.text, round(h.score, 3)) for h in hits] == [(LESSONS[1], 0.9), (LESSONS[2], 0.7)]
    assert hits.threshold == MIN_SIMILARITY  # a stage never calibrated keeps the protocol's 0.6
    assert hits.best_score == pytest.approx(0.9) and hits.retrieval_id is not None


def test_the_second_stage_sees_the_first_stages_best_candidates_only(tmp_path):
    stage = Fixed({})
    lib = filled(tmp_path, stage, LESSONS)
    query = HashEncoder().encode(["anything"])[0]
    first = [h.experience.text for h in lib.search_vector(query, CANDIDATES, -1.0)]
    lib.search("anything")
    assert stage.shown == [first] and len(first) == CANDIDATES < len(LESSONS)


def test_an_explicit_threshold_is_a_cosine_of_the_first_stage(library):
    lib, stage = library
    hits = lib.search(LESSONS[4], min_similarity=0.99)  # the lesson's own text: cosine 1
    assert [h.experience.text for h in hits] == [LESSONS[4]] and stage.shown == []


def test_a_search_by_vector_alone_is_one_stage(library):
    lib, stage = library
    hits = lib.search_vector(HashEncoder().encode([LESSONS[3]])[0])
    assert [h.experience.text for h in hits] == [LESSONS[3]] and stage.shown == []


def test_a_threshold_in_the_environment_is_explicit_so_one_stage(library, monkeypatch):
    lib, stage = library
    monkeypatch.setenv(ENV_MIN_SIMILARITY, "0.99")
    hits = lib.search(LESSONS[4])
    assert [h.experience.text for h in hits] == [LESSONS[4]] and hits.threshold == 0.99 and stage.shown == []


def test_without_rescoring_a_text_search_is_one_stage(tmp_path):
    lib = Library(tmp_path / "lib.sqlite", encoder=HashEncoder(), rescore=False)
    lib.add(LESSONS[0], domain="d")
    assert lib.rescorer is None and [h.score for h in lib.search(LESSONS[0])] == [pytest.approx(1.0, abs=1e-3)]


def test_an_encoder_without_a_calibrated_backbone_gets_no_second_stage(tmp_path):
    assert Library(tmp_path / "lib.sqlite", encoder=HashEncoder()).rescorer is None


def test_the_default_encoder_gets_the_shipped_second_stage(tmp_path):
    assert Library(tmp_path / "lib.sqlite").rescorer.id == "rescore:st:all-MiniLM-L6-v2:when-mean"


def _hits(texts):
    from dsonet.experience import Experience

    return Hits([Hit(Experience(t, "d"), 0.0, (str(i),), ("",)) for i, t in enumerate(texts)], best_score=0.1)


def test_rescored_keeps_k_and_the_token_budget():
    texts = ["When a, do b.", "When c, do d.", "When e, do f."]
    scores = np.array([0.7, 0.9, 0.8], np.float32)
    assert [h.experience.text for h in rescored(_hits(texts), scores, RetrievalPolicy(2, 0.5))] == [texts[1], texts[2]]
    budget = RetrievalPolicy(5, 0.5, max_tokens=6)  # one short lesson's worth
    assert [h.experience.text for h in rescored(_hits(texts), scores, budget)] == [texts[1]]


def test_rescored_with_nothing_to_score_keeps_the_first_stages_best_score():
    out = rescored(_hits([]), np.zeros(0, np.float32), RetrievalPolicy(5, 0.5))
    assert out == [] and out.best_score == 0.1 and out.threshold == 0.5
