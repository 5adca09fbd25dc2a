from dsonet.learn import parse


def test_first_json_object_is_found_inside_chatter_and_nested_braces():
    text = 'Sure! Here: {"op": "UPDATE", "id": "E2", "text": "When {x}, do y"} and {"op": "ADD"}'
    assert parse.first_json_object(text) == {"op": "UPDATE", "id": "E2", "text": "When {x}, do y"}


def test_single_quoted_json_is_tolerated_and_broken_json_skipped():
    assert parse.first_json_object("{'op': 'ADD'}") == {"op": "ADD"}
    assert parse.first_json_object('{"op": ADD} then {"op": "NONE"}') == {"op": "NONE"}
    assert parse.first_json_object("no json here") is None


def test_when_lines_are_extracted_from_bullets_and_numbering():
    text = ("Lessons:\n1. When subtracting a negative number, add its absolute value instead.\n"
            "- **When the problem has several terms, compute left to right one term at a time.**\n"
            "Also check your work.")
    out = parse.experiences(text)
    assert out.items == ("When subtracting a negative number, add its absolute value instead.",
                         "When the problem has several terms, compute left to right one term at a time.")


def test_json_lists_of_experiences_are_read():
    out = parse.experiences('{"experiences": ["When adding money, keep cents as decimals to the end."]}')
    assert out.items == ("When adding money, keep cents as decimals to the end.",)


def test_over_long_and_shapeless_lessons_are_skipped_and_counted():
    long = "When " + " ".join(["word"] * 40) + ", do it."
    out = parse.experiences(f"{long}\nWhen in doubt guess\nWhen a sum has negatives, track the sign of each term.")
    assert out.items == ("When a sum has negatives, track the sign of each term.",)
    assert len(out.skipped) == 2 and any("too long" in s for s in out.skipped)


def test_nothing_recoverable_gives_no_items_and_a_reason():
    out = parse.experiences("The answer is 42.")
    assert out.items == () and out.skipped == ("no JSON and no line starting 'When'",)


def test_duplicate_lessons_are_kept_once_and_capped():
    text = "\n".join(["When x is even, halve it before multiplying."] * 2 +
                     [f"When case {i} holds, apply rule number {i} first." for i in range(5)])
    out = parse.experiences(text, max_items=3)
    assert len(out.items) == 3 and len(set(out.items)) == 3


def test_operations_parse_from_json_or_bare_words():
    assert parse.operation('{"op": "delete", "id": "E3"}') == ({"op": "DELETE", "id": "E3"}, "")
    assert parse.operation("I choose UPDATE on E2 because") == ({"op": "UPDATE", "id": "E2"}, "")
    op, why = parse.operation("hmm, maybe")
    assert op is None and "no JSON operation" in why


def test_echoed_templates_truncated_lessons_and_the_prompts_example_are_skipped():
    text = ("When <situation>, <what to do>: When a sum has two terms, add the second to the first.\n"
            "When you're\nWhen a problem mixes several steps, do one step at a time and write each result.")
    out = parse.experiences(text, reject=("When a problem mixes several steps, do one step at a time and write "
                                          "each result.",))
    assert out.items == ("When a sum has two terms, add the second to the first.",)
    assert any("example" in s for s in out.skipped) and len(out.skipped) == 2


def test_several_when_sentences_on_one_line_are_separate_lessons_and_cut_ones_dropped():
    text = ("When <situation>, <what to do> is: When a sum has two terms, add the second to the first. "
            "When a term is negative, subtract its size instead.\nWhen you face a puzzle, think of it as a step-")
    out = parse.experiences(text)
    assert out.items == ("When a sum has two terms, add the second to the first.",
                         "When a term is negative, subtract its size instead.")
    assert len(out.skipped) == 1


def test_lessons_that_restate_the_problem_are_rejected_with_the_reason():
    problem = 'How many times does the letter "t" appear in the text: "the cat sat"? Items: 81, 117'
    assert "81" in parse.specific_to("When the numbers are 81 and 117, divide by 9.", problem)
    assert "'t'" in parse.specific_to('When counting "t" in a text, look at every word.', problem)
    assert "answer" in parse.specific_to("When counting letters here, the answer is 3.", problem, reference="3")
    assert parse.specific_to("When counting a letter, check every word, including the first.", problem, "3") == ""
    assert parse.specific_to("When two numbers share no factor, the GCD is 1.", "GCD of 8 and 9", "1") == ""
    siblings = "Mary has 1 brothers and she also has 1 sisters. How many sisters does Mary's brother have?"
    assert "'Mary'" in parse.specific_to("When Mary has 1 brothers and 1 sisters, her brother has 2 sisters.", siblings)
    assert parse.specific_to("When a girl has brothers and sisters, her brother has one more sister.", siblings) == ""
    lcm = ["Find the Least Common Multiple (LCM) of these numbers: 12, 18", "Find the Least Common Multiple (LCM) of: 4, 6"]
    assert parse.shared_words(lcm) == {"Find", "Least", "Common", "Multiple"}
    term = "When finding the Least Common Multiple, divide the product by the GCD."
    assert parse.specific_to(term, lcm[0], shared=parse.shared_words(lcm)) == ""
    assert parse.shared_words([siblings, "Linda has 2 brothers. How many sisters does Linda's brother have?"]) == {"How"}
    # one problem alone (an agent's traffic: no others of its kind to share with): a capitalised word that the
    # code which ran calls names an API, not the instance
    simpson = "Write one line of Python that assigns to r the integral of z over data by Simpson's rule."
    lesson = "When computing the integral by Simpson's rule, use integrate.simpson(y, x)."
    assert parse.specific_to(lesson, simpson, reference="from scipy.integrate import simpson\nr = simpson(z, data)") == ""
    assert "'Simpson'" in parse.specific_to(lesson, simpson, reference="r = integrate.quad(f, 0, 1)")
    out = parse.experiences("When the numbers are 81 and 117, divide by 9.", problem=problem)
    assert out.items == () and out.skipped[0].startswith("problem-specific (restates the problem's number 81)")


def test_a_reply_cut_at_the_token_limit_loses_its_last_lesson():
    text = "When signs differ, subtract the smaller magnitude.\nWhen a term is negative, keep its sign and"
    out = parse.experiences(text, truncated=True)
    assert out.items == ("When signs differ, subtract the smaller magnitude.",)
    assert out.skipped[0].startswith("truncated at the token limit")


def test_batch_operations_read_a_json_list_or_candidate_lines():
    ops, skipped = parse.batch_operations(
        '[{"candidate": "C1", "op": "add"}, {"candidate": "C2", "op": "UPDATE", "id": "e1", "text": "When x, y z."},'
        ' {"candidate": "C9", "op": "NONE"}]', 2)
    assert ops == {0: {"op": "ADD"}, 1: {"op": "UPDATE", "id": "E1", "text": "When x, y z."}}
    assert skipped == ["entry 2 names candidate 'C9'; only C1..C2 were shown"]
    assert parse.batch_operations("C1: NONE\nC2 -> DELETE E3", 2)[0] == {0: {"op": "NONE"}, 1: {"op": "DELETE", "id": "E3"}}
    assert parse.batch_operations("no idea", 1)[0] == {}


def test_a_lesson_that_stops_on_a_colon_is_unfinished():
    out = parse.experiences("When scoring higher, the attempts show a habit in the following ways:.")
    assert out.items == () and out.skipped[0].startswith("unfinished (ends on ':')")
