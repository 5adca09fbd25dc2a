from fractions import Fraction

import pytest

from dsonet.learn.answers import extract_answer, numbers_match, parse_number


@pytest.mark.parametrize("response", [
    "18", "The answer is 18", "The answer is 18.", "Answer: $18", "Answer: 18.0", "#### 18",
    "So she earns \\boxed{18} dollars.", "She pays 3 + 15.\n18", "**Answer:** 18.00", "answer = 1.8e1",
])
def test_numeric_answers_match_despite_formatting(response):
    assert numbers_match(response, "18")


def test_thousands_separators_and_dollars_are_read_as_one_number():
    assert numbers_match("The answer is $1,234,567.", "1234567")
    assert parse_number("$1,234.50") == Fraction("1234.5")


def test_the_last_answer_marker_wins_over_earlier_numbers():
    assert extract_answer("First 3 + 4 = 7, then 7 * 2 = 14.\nAnswer: 14") == "14"
    assert not numbers_match("Answer: 7 apples, no wait, the answer is 9", "7")


def test_negative_numbers_and_fractions():
    assert numbers_match("Answer: -4", "-4")
    assert not numbers_match("Answer: 4", "-4")
    assert numbers_match("Answer: 3/4", "0.75")


def test_no_number_means_no_match():
    assert not numbers_match("I do not know.", "18")
    assert not numbers_match("", "18")
    assert parse_number("none") is None


@pytest.mark.parametrize("reply, kind, expected", [
    ("Answer: 8 + 5 = 13", "number", "13"),  # the result of the equation, not its first term
    ("First 8 + 5.\nAnswer: 13 apples", "number", "13"),
    ("1. [reasoning] When adding, carry the tens.\n2. [reasoning] When subtracting, borrow.", "number", None),
    ("- When adding, carry.\n- When subtracting, borrow.", "number", None),  # a copied lesson block: no answer
    ("13", "number", "13"),
    ("Answer: 12/35", "fraction", "12/35"),
    ("The answer is \\frac{3}{4}.", "fraction", "3/4"),
    ("Answer: 18/24 = 3/4", "fraction", "3/4"),
    ("Answer: 7", "fraction", "7"),
    ("I cannot simplify this.", "fraction", None),
    ("Answer: ['-3', '1.5', '7']", "list", "['-3', '1.5', '7']"),
    ("Sorted:\nAnswer:\n['1', '2']", "list", "['1', '2']"),
    ("Answer: **apple, banana**.", "text", "apple, banana"),
])
def test_answers_are_extracted_by_their_kind_and_failures_are_none(reply, kind, expected):
    from dsonet.learn.answers import extract

    assert extract(reply, kind) == expected


def test_an_unknown_kind_is_named():
    from dsonet.learn.answers import extract

    with pytest.raises(ValueError, match="kind"):
        extract("Answer: 1", "matrix")
