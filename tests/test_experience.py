import pytest

from dsonet.experience import MAX_EVIDENCE, MAX_WORDS, Experience, ExperienceError, Provenance, experience_id


def test_id_is_the_hash_of_normalised_text_and_domain():
    a = Experience("  When x,\n do   y ", "math")
    assert a.text == "When x, do y"
    assert a.id == experience_id("When x, do y", "math") == experience_id(" When  x, do y", "math")
    assert a.id != Experience("When x, do y", "code").id


def test_word_limit_counts_words_after_normalising():
    Experience(" ".join(["w"] * MAX_WORDS) + "   \n")
    with pytest.raises(ExperienceError, match=f"{MAX_WORDS + 1} words"):
        Experience("  ".join(["w"] * (MAX_WORDS + 1)))


@pytest.mark.parametrize("kwargs,field", [({"text": ""}, "text"), ({"text": "ok", "domain": "Bad Domain"}, "domain"),
                                          ({"text": "ok", "confidence": 1.5}, "confidence")])
def test_bad_fields_are_named(kwargs, field):
    with pytest.raises(ExperienceError, match=field):
        Experience(**kwargs)


@pytest.mark.parametrize("episodes,agents,says", [
    (-1, 0, r"provenance.episodes: -1 must be an integer in \[0, 1000000000\]"),
    (MAX_EVIDENCE + 1, 0, "provenance.episodes: 1000000001"),
    (1.0, 1, "provenance.episodes: 1.0 must be an integer"),
    (True, 0, "provenance.episodes: True"),
    (2, "1", "provenance.agents: '1' must be an integer"),
    (1, 2, "provenance.agents: 2 agents but 1 episodes"),
])
def test_evidence_that_is_no_count_is_refused_naming_the_field(episodes, agents, says):
    with pytest.raises(ExperienceError, match=says):
        Provenance("n1", episodes=episodes, agents=agents)


def test_evidence_is_provenance_so_a_lesson_keeps_its_id_whatever_its_evidence():
    plain = Experience("When x fails, do y")
    learned = Experience("When x fails, do y", provenance=Provenance("n1", episodes=7, agents=3))
    assert learned.id == plain.id and (plain.provenance.episodes, plain.provenance.agents) == (0, 0)
    assert Experience.from_dict(learned.to_dict()) == learned


def test_a_provenance_field_this_version_does_not_know_is_left_out_not_an_error():
    data = Experience("When x fails, do y", provenance=Provenance("n1", episodes=2, agents=1)).to_dict()
    data["provenance"]["from_a_newer_peer"] = 1
    assert Experience.from_dict(data).provenance == Provenance("n1", episodes=2, agents=1)
