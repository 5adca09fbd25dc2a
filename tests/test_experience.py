import pytest

from dsonet.experience import MAX_WORDS, Experience, ExperienceError, experience_id


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
