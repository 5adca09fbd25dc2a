"""The learner on tasks whose answers are code that was run: each attempt shown with what running it
showed, several sampled candidate lessons per group with the gate keeping the best, and a gate on
the validation items nearest a lesson. A scripted LLM and a keyword encoder stand in: the subject is
the loop (the real models and sandbox run in `dso bench learn --family drift`)."""

import json

import numpy as np
import pytest

from dsonet.learn import parse
from dsonet.learn.chat import Completion
from dsonet.learn.context import Retrieval
from dsonet.learn.grpo import LearnConfig, Learner
from dsonet.learn.run_dir import LearnError
from dsonet.learn.tasks import Task, TaskSet

from .conftest import DictStore, outputs_under_hash_seeds

GOOD = "When rounding with the mylib library, call mylib.round_half instead of mylib.rnd."
BAD = "When rounding with the mylib library, call mylib.rnd; it is the current name."


def _verify(task, reply):
    return 1.0 if "round_half" in reply else 0.0


def _explain(task, reply):
    return "r = 4" if "round_half" in reply else "AttributeError: module 'mylib' has no attribute 'rnd'"


def _tasks(n=4, start=0):
    tasks = [Task(f"t{i}", f"The code below has run:\nvalues_{i} = [{i}.5]\nRound values_{i} with mylib and assign to r.",
                  "r = mylib.round_half(values)", "code.python") for i in range(start, start + n)]
    return TaskSet("rounding", tasks, _verify, "Reply with the line only.", "text", _explain)


class CodeLLM:
    """Rollouts: half the samples use the current name. Advantage replies: sample 0 the wrong lesson,
    sample 1 the right one. Greedy answers use the current name only when the right lesson is shown."""

    name = "code-scripted"

    def __init__(self):
        self.calls = []

    def generate(self, chats, n=1, temperature=0.7, max_tokens=128, seed=None):
        out = []
        for chat in chats:
            text, system = chat[-1]["content"], chat[0]["content"] if len(chat) > 1 else ""
            self.calls.append((text, n, temperature))
            if text.startswith("Several attempts"):
                texts = tuple((BAD, GOOD)[i % 2] for i in range(n))
            elif n > 1:
                texts = tuple("r = mylib.round_half(v)" if i % 2 else "r = mylib.rnd(v)" for i in range(n))
            else:
                texts = ("r = mylib.round_half(v)" if "round_half instead" in system else "r = mylib.rnd(v)",)
            out.append(Completion(texts, 10, 5 * n))
        return out


class KeywordEncoder:
    """Items and lessons that share the word 'values_0' or 'values_1' are near; the rest far."""

    def encode(self, texts, kind="query"):
        return np.array([[("values_0" in t) + 0.1, ("values_1" in t) + 0.1, 1.0] for t in texts], np.float32)


def _log(path):
    return [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines()]


def test_code_attempts_reach_the_reflector_with_what_running_them_showed(tmp_path):
    llm, store = CodeLLM(), DictStore()
    Learner(llm, store, LearnConfig(group_size=4, epochs=1, batch_size=4, retrieval=Retrieval(min_similarity=0.5)),
            tmp_path).run(_tasks(), False)
    advantage = [c for c, _, _ in llm.calls if c.startswith("Several attempts at the same Python task")]
    assert len(advantage) == 4
    assert "Reference solution: r = mylib.round_half(values)" in advantage[0]
    assert "(failed): r = mylib.rnd(v) -> AttributeError: module 'mylib' has no attribute 'rnd'" in advantage[0]
    assert "(passed): r = mylib.round_half(v) -> r = 4" in advantage[0]


def test_of_sampled_candidates_the_gate_keeps_the_one_that_passes_validation(tmp_path):
    llm, store = CodeLLM(), DictStore()
    config = LearnConfig(group_size=4, epochs=1, batch_size=4, candidates=2, gate_gain=1e-9,
                         retrieval=Retrieval(min_similarity=0.5))
    stats = Learner(llm, store, config, tmp_path).run(_tasks(), False, validation=_tasks(2, start=10))
    assert [e.text for e in store.items.values()] == [GOOD]
    # two candidates a group, sampled (not greedy), and the wrong one refused on validation
    assert all(n == 2 and t > 0 for c, n, t in llm.calls if c.startswith("Several attempts"))
    gates = [r for r in _log(tmp_path) if r["type"] == "gate"]
    assert {(r["text"], r["kept"]) for r in gates} == {(GOOD, True), (BAD, False)}
    assert stats.proposals == 8 and stats.gated_out == 1  # duplicates are merged before the gate: one of each


def test_the_gate_can_judge_a_lesson_on_the_validation_items_nearest_it(tmp_path):
    store, encoder = DictStore(), KeywordEncoder()
    config = LearnConfig(group_size=4, epochs=1, batch_size=4, gate_items=2, retrieval=Retrieval(min_similarity=0.5))
    learner = Learner(CodeLLM(), store, config, tmp_path, encoder=encoder)
    learner.use_validation(_tasks(6))
    items = learner._gate_items("When a list like values_1 is rounded, call mylib.round_half.")
    assert len(items) == 3 and 1 in items  # the nearest two (values_1 first) and one other
    assert np.array_equal(items, learner._gate_items("When a list like values_1 is rounded, call mylib.round_half."))


def test_gate_items_needs_an_encoder():
    with pytest.raises(LearnError, match="pass the encoder"):
        Learner(CodeLLM(), DictStore(), LearnConfig(gate_items=4))


def test_a_code_problems_variables_are_specific_but_library_names_are_not():
    problem = "The code below has run:\nweights_b = np.array([1, 3])\nxs2 = [4]\nIntegrate weights_b with numpy."
    assert "variable 'weights_b'" in parse.specific_to("When integrating weights_b, call np.trapezoid.", problem)
    assert parse.specific_to("When integrating samples with NumPy, call np.trapezoid, not np.trapz.", problem) == ""
    # a variable every problem of the step assigns is the kind's vocabulary
    shared = parse.shared_words([problem, "weights_b = 1\nother"])
    assert parse.specific_to("When integrating weights_b, call np.trapezoid.", problem, shared=shared) == ""


def test_a_plain_word_variable_is_refused_only_where_it_sits_in_code():
    problem = "The code below has run:\nsamples = [1, 2]\nvalues = [3]\nIntegrate values over samples."
    assert "names the problem's variable" in parse.specific_to("When integrating, call np.trapezoid(values, samples).", problem)
    assert parse.specific_to("When integrating samples with NumPy, call np.trapezoid, not np.trapz.", problem) == ""


def test_a_copied_reference_call_keeps_its_function_and_loses_the_tasks_variables():
    problem = "The code below has run:\nsamples = [1, 2]\nz = [3]\nIntegrate z over samples."
    parsed = parse.experiences("When integrating with NumPy, call np.trapezoid(z, samples); np.trapz does not exist.",
                               problem=problem)
    assert parsed.items == ("When integrating with NumPy, call np.trapezoid(z, x); np.trapz does not exist.",)
    assert parse.generalise_arguments("When sorting, call sorted(items, key=len).", problem) == \
        "When sorting, call sorted(items, key=len)."


def test_variables_of_the_same_length_get_their_letters_in_the_order_written_in_every_run():
    problem = "The code below has run:\nxs = [1, 2]\nys = [3, 4]\nIntegrate ys over xs."
    script = ("import sys\nfrom dsonet.learn import parse\n"
              "print(parse.generalise_arguments('When integrating, call np.trapezoid(ys, xs).', sys.argv[1]))")
    assert outputs_under_hash_seeds(script, problem) == {"When integrating, call np.trapezoid(x, y).\n"}


def test_rule_lessons_join_the_candidates_and_face_the_same_gate(tmp_path):
    config = LearnConfig(group_size=4, epochs=1, batch_size=4, rule_lessons=True, retrieval=Retrieval(min_similarity=0.5))
    stats = Learner(CodeLLM(), DictStore(), config, tmp_path).run(_tasks(2), False, validation=_tasks(2, start=10))
    rules = [r for r in _log(tmp_path) if r["type"] == "rule_lesson"]
    assert len(rules) == 2 and "use mylib.round_half(values) instead" in rules[0]["text"] and "refuses mylib.rnd" in rules[0]["text"]
    assert rules[0]["error"] == "AttributeError: module 'mylib' has no attribute 'rnd'"
    gated = {r["text"] for r in _log(tmp_path) if r["type"] == "gate"}
    assert any("use mylib.round_half(values) instead" in t for t in gated) and stats.proposals == 4


def test_rule_first_asks_the_reflector_only_where_the_error_line_spells_out_no_lesson(tmp_path):
    llm = CodeLLM()
    config = LearnConfig(group_size=4, epochs=1, batch_size=4, rule_lessons=True, rule_first=True,
                         retrieval=Retrieval(min_similarity=0.5))
    stats = Learner(llm, DictStore(), config, tmp_path).run(_tasks(2), False, validation=_tasks(2, start=10))
    assert not [c for c in llm.calls if c[0].startswith("Several attempts")]  # every group's error named the fix
    assert stats.proposals == 2 and len([r for r in _log(tmp_path) if r["type"] == "rule_lesson"]) == 2


def test_an_error_lines_lesson_that_would_restate_the_problem_is_kept_in_a_plainer_phrasing(tmp_path):
    """The reference's call carries the problem's number (7, 8): phrased with it, the lesson was refused and its
    group went without one (rule_first asks no reflector where the error line spells one out)."""
    tasks = [Task(f"t{i}", f"The code below has run:\nvalues_{i} = [{i}.5]\nRound values_{i} with mylib to {7 + i} "
                  "places, assign to r.", f"r = mylib.round_half(values, {7 + i})", "code.python") for i in range(2)]
    llm = CodeLLM()
    config = LearnConfig(group_size=4, epochs=1, batch_size=4, rule_lessons=True, rule_first=True,
                         retrieval=Retrieval(min_similarity=0.5))
    Learner(llm, DictStore(), config, tmp_path).run(TaskSet("rounding", tasks, _verify, "Reply with the line only.",
                                                            "text", _explain), False)
    rules = [r["text"] for r in _log(tmp_path) if r["type"] == "rule_lesson"]
    assert rules == ["When your code would use mylib.rnd, use mylib.round_half instead: this environment refuses "
                     "mylib.rnd (AttributeError)."] * 2
    assert not [r for r in _log(tmp_path) if r["type"] == "skipped" and r.get("raw") in rules]
    assert not [c for c in llm.calls if c[0].startswith("Several attempts")]


class StubbornLLM(CodeLLM):
    """As CodeLLM, but its greedy answers keep the old name whatever the prompt says: no lesson shows a gain."""

    def generate(self, chats, n=1, temperature=0.7, max_tokens=128, seed=None):
        out = super().generate(chats, n, temperature, max_tokens, seed)
        return [Completion(("r = mylib.rnd(v)",), c.prompt_tokens, c.completion_tokens) if n == 1 else c for c in out]


@pytest.mark.parametrize("repair_check, kept", [(False, 0), (True, 1)])
def test_an_error_lines_lesson_whose_swap_fixes_its_own_attempt_needs_only_a_tie(tmp_path, repair_check, kept):
    """rnd -> round_half, made in the failed attempt, passes its check: the lesson fixed that instance by
    execution, so the gate asks it only to do no harm (the agent here ignores every lesson: a tie)."""
    config = LearnConfig(group_size=4, epochs=1, batch_size=4, rule_lessons=True, rule_first=True, gate_gain=1e-9,
                         repair_check=repair_check, retrieval=Retrieval(min_similarity=0.5))
    store = DictStore()
    Learner(StubbornLLM(), store, config, tmp_path).run(_tasks(1), False, validation=_tasks(2, start=10))
    assert len(store.items) == kept
    assert [r["repaired"] for r in _log(tmp_path) if r["type"] == "rule_lesson"] == [repair_check]
    gate = [r for r in _log(tmp_path) if r["type"] == "gate"]
    assert [(r["accuracy_with"], r["accuracy_without"], r["repaired"], r["kept"]) for r in gate] == \
        [(0.0, 0.0, repair_check, repair_check)]


def test_where_no_error_line_spells_out_a_lesson_the_reference_does_and_no_reflector_is_asked(tmp_path):
    def explain(task, reply):
        return "r = 4" if "round_half" in reply else "r = 5, expected a different value"

    tasks = [Task(f"t{i}", f"The code below has run:\nvalues_{i} = [{i}.5]\nWrite one line of Python that assigns to "
                  "r the values rounded half to even.", "r = mylib.round_half(values)", "code.python") for i in range(2)]
    llm = CodeLLM()
    config = LearnConfig(group_size=4, epochs=1, batch_size=4, rule_lessons=True, rule_first=True,
                         retrieval=Retrieval(min_similarity=0.5))
    Learner(llm, DictStore(), config, tmp_path).run(TaskSet("rounding", tasks, _verify, "Reply with the line only.",
                                                            "text", explain), False)
    rules = [r for r in _log(tmp_path) if r["type"] == "rule_lesson"]
    assert [(r["text"], r["source"]) for r in rules] == \
        [("When computing the values rounded half to even, use mylib.round_half(values).", "reference")] * 2
    assert not [c for c in llm.calls if c[0].startswith("Several attempts")]
