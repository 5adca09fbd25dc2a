"""`dso bench relevance`'s labelled data: the kept file is what its generator writes, a pair is judged
as the report says, and the split is by lesson."""

import json

from dsonet.bench.relevance_pairs import PAIRS, Lesson, Query, build_pairs, judge, load_pairs, split


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
