"""The learner's loop — grouping, advantage, operations, skip counting, logging, resume — driven by
a scripted LLM (the subject is the loop, not the model; the real SmolLM2 run is in
test_smollm2.py) over the dict-backed store."""

import json

import pytest

from dsonet.learn import prompts
from dsonet.learn.chat import Completion
from dsonet.learn.grpo import LearnConfig, Learner
from dsonet.learn.run_dir import LearnError
from dsonet.learn.tasks import Group, Task, TaskSet, numeric_verifier

from dsonet.learn.context import Retrieval
from dsonet.learn.episodes import PROBATION

from .conftest import DictStore

ANY = Retrieval(min_similarity=-1.0)

LESSON = "When a sum has negative terms, add them one at a time and keep each sign."
NONE_REPLY = '[{"candidate": "C1", "op": "NONE"}, {"candidate": "C2", "op": "NONE"}]'
HARMFUL = "When a number must be doubled, write HARM before the result."


class ScriptedLLM:
    """Solves even-numbered tasks in 3 of 4 samples, odd ones never; lessons and operations as scripted."""

    name = "scripted"

    def __init__(self, lesson_reply=LESSON, op_reply=NONE_REPLY):
        self.lesson_reply, self.op_reply, self.calls = lesson_reply, op_reply, []

    def generate(self, chats, n=1, temperature=0.7, max_tokens=128, seed=None):
        out = []
        for chat in chats:
            text = chat[-1]["content"]
            self.calls.append(text)
            if text.startswith("Several attempts"):  # "{n}" in a scripted lesson: the problem's number
                texts = (self.lesson_reply.replace("{n}", (text.split("#") + ["?"])[1].split()[0]),) * n
            elif text.startswith("You keep a short list"):
                texts = (self.op_reply,) * n
            else:
                number = int(text.split("#")[1].split()[0])
                right = f"Answer: {number * 2}"
                if "HARM" in chat[0]["content"]:  # a harmful lesson in the system message: every answer wrong
                    right = "Answer: 0"
                texts = tuple(right if number % 2 == 0 and i % 4 != 3 else "Answer: 0" for i in range(n))
            out.append(Completion(texts, 10, 5 * n))
        return out


def _tasks(n=6):
    return TaskSet("double", [Task(f"t{i}", f"Double #{i} please", str(i * 2), "math.doubling") for i in range(1, n + 1)],
                   numeric_verifier)


def test_mixed_groups_teach_one_lesson_and_uniform_groups_teach_nothing(tmp_path):
    store, llm = DictStore(), ScriptedLLM()
    stats = Learner(llm, store, LearnConfig(group_size=4, epochs=1, batch_size=3), tmp_path).run(_tasks(), False)
    assert stats.rollouts == 24 and stats.groups == 6 and stats.mixed_groups == 3
    assert stats.mean_reward == pytest.approx(9 / 24)
    assert [e.text for e in store.items.values()] == [LESSON]
    exp = next(iter(store.items.values()))
    assert exp.domain == "math.doubling" and exp.confidence == 0.95
    # three mixed groups proposed the same lesson: one ADD, the other two merged or found duplicate
    assert stats.proposals == 3 and stats.operations["ADD"] == 1
    assert sum(c.startswith("Several attempts") for c in llm.calls) == 3
    # the advantage prompt saw all four attempts of the group and the reference answer
    advantage = next(c for c in llm.calls if c.startswith("Several attempts"))
    number = int(advantage.split("#")[1].split()[0])
    assert f"Correct answer: {number * 2}" in advantage and advantage.count("Attempt ") == 4


def test_malformed_lessons_are_counted_and_leave_the_library_untouched(tmp_path):
    store = DictStore()
    llm = ScriptedLLM(lesson_reply="Sure! I think the better one was good.")
    stats = Learner(llm, store, LearnConfig(group_size=4, epochs=1, batch_size=6), tmp_path).run(_tasks(), False)
    assert store.items == {} and stats.skipped == 3 and stats.proposals == 0
    skipped = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert sum(r["type"] == "skipped" for r in skipped) == 3


def test_operations_with_unknown_ids_are_skipped(tmp_path):
    store = DictStore()
    store.add(LESSON, "math.doubling")  # the dict store finds it as "similar", so the LLM is asked
    llm = ScriptedLLM(op_reply='[{"candidate": "C1", "op": "DELETE", "id": "E9"}]')
    stats = Learner(llm, store, LearnConfig(group_size=4, epochs=1, batch_size=6), tmp_path).run(_tasks(), False)
    # one batch of three mixed groups: C1 names an id never shown, C2 and C3 get no operation
    assert len(store.items) == 1 and stats.skipped == 3 and stats.operations["DELETE"] == 0
    assert any(c.startswith("You keep a short list") and "E1: " + LESSON in c and "C3: " in c for c in llm.calls)


def test_every_rollout_and_operation_is_logged(tmp_path):
    Learner(ScriptedLLM(), DictStore(), LearnConfig(group_size=4, epochs=2, batch_size=3), tmp_path).run(_tasks(), False)
    rows = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert sum(r["type"] == "rollout" for r in rows) == 48
    assert {r["type"] for r in rows} >= {"rollout", "proposal", "operation"}
    assert {r["epoch"] for r in rows} == {0, 1}


def test_an_interrupted_run_resumes_at_the_next_batch(tmp_path):
    config = LearnConfig(group_size=4, epochs=2, batch_size=3)
    full = Learner(ScriptedLLM(), DictStore(), config, tmp_path / "full").run(_tasks(), False)

    class Interrupt(Exception):
        pass

    llm = ScriptedLLM()
    first = Learner(llm, DictStore(), config, tmp_path / "cut")
    real = first.rollouts

    def dying(tasks, batch, seed):
        if first.stats.batches == 2:
            raise Interrupt
        return real(tasks, batch, seed)

    first.rollouts = dying
    with pytest.raises(Interrupt):
        first.run(_tasks(), False)
    assert json.loads((tmp_path / "cut" / "state.json").read_text())["next"] == 2
    again = ScriptedLLM()
    resumed = Learner(again, DictStore(), config, tmp_path / "cut").run(_tasks(), False)
    assert resumed.batches == full.batches == 4 and resumed.rollouts == full.rollouts
    assert sum(c.startswith("Double #") for c in again.calls) == 6  # only the last two batches' queries were rolled out


def test_a_run_directory_refuses_other_settings(tmp_path):
    Learner(ScriptedLLM(), DictStore(), LearnConfig(group_size=4, epochs=1), tmp_path).run(_tasks(), False)
    with pytest.raises(LearnError, match="new --run-dir"):
        Learner(ScriptedLLM(), DictStore(), LearnConfig(group_size=5, epochs=1), tmp_path).run(_tasks(), False)


def test_telemetry_groups_teach_without_rollouts():
    store, llm = DictStore(), ScriptedLLM()
    groups = [Group("Call the tool 'calc' with: 2+2", "tool.calc", ("4", "error"), (1.0, 0.0))]
    Learner(llm, store, LearnConfig()).learn_groups(groups)
    assert [e.domain for e in store.items.values()] == ["tool.calc"]
    assert all(not c.startswith("Double") for c in llm.calls)


def test_prompts_are_versioned():
    assert prompts.PROMPTS_VERSION and "{reference}" in prompts.SUMMARISE and "{reference}" in prompts.ADVANTAGE
    assert "{summaries}" in prompts.ADVANTAGE and "C1" in prompts.UPDATE and "E1" in prompts.UPDATE


def test_problem_specific_and_truncated_lessons_are_rejected_with_reasons(tmp_path):
    reply = "When doubling {n}, add {n} to itself.\nWhen doubling any number, add it to itself"
    llm = ScriptedLLM(lesson_reply=reply)
    llm.generate_real = llm.generate

    def truncating(chats, n=1, temperature=0.7, max_tokens=128, seed=None):
        out = llm.generate_real(chats, n, temperature, max_tokens, seed)
        return [Completion(c.texts, c.prompt_tokens, max_tokens) if "any number" in c.texts[0] else c for c in out]

    llm.generate = truncating
    store = DictStore()
    Learner(llm, store, LearnConfig(group_size=4, epochs=1, batch_size=6), tmp_path).run(_tasks(), False)
    reasons = [json.loads(l)["reason"] for l in (tmp_path / "log.jsonl").read_text().splitlines()
               if json.loads(l)["type"] == "skipped"]
    # groups #2, #4, #6 were mixed: "When doubling 2" is kept (0, 1 and 2 are common in general advice)
    assert [e.text for e in store.items.values()] == ["When doubling 2, add 2 to itself."]
    assert any(r.startswith("truncated at the token limit") for r in reasons)
    assert any("problem-specific" in r for r in reasons)


def test_the_validation_gate_refuses_a_lesson_that_lowers_accuracy(tmp_path):
    store = DictStore()
    learner = Learner(ScriptedLLM(lesson_reply=HARMFUL), store, LearnConfig(group_size=4, epochs=1, batch_size=6),
                      tmp_path)
    stats = learner.run(_tasks(), False, validation=_tasks(4))
    assert store.items == {} and stats.gated_out == 1
    gate = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines() if '"gate"' in l]
    assert gate[0]["accuracy_without"] == 0.5 and gate[0]["accuracy_with"] == 0.0 and not gate[0]["kept"]
    assert stats.validation == [0.5, 0.5]


@pytest.mark.parametrize("probation", [False, True])
def test_a_lesson_that_ties_at_the_gate_is_refused_or_with_probation_kept_at_probation_confidence(tmp_path, probation):
    """The scripted agent ignores LESSON: with it, without it and with neutral text alike, 0.5 on validation."""
    store = DictStore()
    config = LearnConfig(group_size=4, epochs=1, batch_size=6, gate_gain=1e-9, probation=probation)
    stats = Learner(ScriptedLLM(), store, config, tmp_path).run(_tasks(), False, validation=_tasks(4))
    (gate,) = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines() if '"gate"' in l]
    assert (gate["accuracy_without"], gate["accuracy_with"], gate["kept"], gate["probation"]) == (0.5, 0.5, False,
                                                                                                   probation)
    if probation:
        (exp,) = store.items.values()
        assert exp.text == LESSON and exp.confidence == PROBATION and (stats.on_probation, stats.gated_out) == (1, 0)
    else:
        assert store.items == {} and (stats.on_probation, stats.gated_out) == (0, 1)


def test_probation_does_not_keep_a_lesson_that_lowers_accuracy(tmp_path):
    store = DictStore()
    config = LearnConfig(group_size=4, epochs=1, batch_size=6, gate_gain=1e-9, probation=True)
    stats = Learner(ScriptedLLM(lesson_reply=HARMFUL), store, config, tmp_path).run(_tasks(), False,
                                                                                    validation=_tasks(4))
    assert store.items == {} and (stats.on_probation, stats.gated_out) == (0, 1)


class LengthSensitiveLLM(ScriptedLLM):
    """Neutral text in the system message makes every answer right: length, not content, moves it."""

    def generate(self, chats, n=1, temperature=0.7, max_tokens=128, seed=None):
        out = super().generate(chats, n, temperature, max_tokens, seed)
        right = lambda chat: f"Answer: {int(chat[-1]['content'].split('#')[1].split()[0]) * 2}"  # noqa: E731
        return [Completion((right(c),) * n, 10, 5 * n) if "library opens" in c[0]["content"] else o
                for c, o in zip(chats, out)]


def test_the_gate_refuses_a_lesson_that_does_less_than_neutral_text_of_its_length(tmp_path):
    store = DictStore()
    stats = Learner(LengthSensitiveLLM(), store, LearnConfig(group_size=4, epochs=1, batch_size=6), tmp_path).run(
        _tasks(), False, validation=_tasks(4))
    assert store.items == {} and stats.gated_out == 1
    (gate,) = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines() if '"gate"' in l]
    assert (gate["accuracy_without"], gate["accuracy_with"], gate["accuracy_neutral"]) == (0.5, 0.5, 1.0)


def test_a_kept_lesson_records_its_validation_uses_and_later_rollouts_as_outcomes(tmp_path):
    store = DictStore()
    stats = Learner(ScriptedLLM(), store, LearnConfig(group_size=4, epochs=2, batch_size=6, retrieval=ANY),
                    tmp_path).run(_tasks(), False, validation=_tasks(4))
    (exp_id,) = store.items
    uses, helped = store.outcomes[exp_id]
    assert stats.gated_out == 0 and uses == 4 + 6 * 4 and helped == 2 + 9  # 4 validation answers, 24 rollouts


def test_settings_are_checked():
    with pytest.raises(LearnError, match="group_size"):
        LearnConfig(group_size=1)


def test_a_reflector_writes_the_lessons_while_the_agent_answers(tmp_path):
    agent, teacher, store = ScriptedLLM(lesson_reply="unused"), ScriptedLLM(), DictStore()
    Learner(agent, store, LearnConfig(group_size=4, epochs=1, batch_size=6), tmp_path, reflector=teacher).run(_tasks(), False)
    assert [e.text for e in store.items.values()] == [LESSON]
    assert not any(c.startswith("Several attempts") for c in agent.calls)
    assert sum(c.startswith("Several attempts") for c in teacher.calls) == 3
    assert not any(c.startswith("Double #") for c in teacher.calls)


class FactLLM(ScriptedLLM):
    """Validation answers are right where the system message holds the lesson for the task's parity:
    "fact even" fixes even tasks, "fact odd" odd ones (two lessons about different things)."""

    def generate(self, chats, n=1, temperature=0.7, max_tokens=128, seed=None):
        out = super().generate(chats, n, temperature, max_tokens, seed)
        fixed = []
        for chat, o in zip(chats, out):
            text = chat[-1]["content"]
            if text.startswith(("Several attempts", "You keep a short list")):
                fixed.append(o)
                continue
            number = int(text.split("#")[1].split()[0])
            knows = f"fact {'even' if number % 2 == 0 else 'odd'}" in chat[0]["content"]
            fixed.append(Completion((f"Answer: {number * 2}" if knows else "Answer: 0",) * n, 10, 5 * n))
        return fixed


EVEN, ODD = "When the number is even, use fact even.", "When the number is odd, use fact odd."


def test_an_update_that_does_not_beat_the_lesson_it_replaces_is_added_beside_it(tmp_path):
    store = DictStore()
    old = store.add(EVEN, "math.doubling")
    llm = FactLLM(lesson_reply=ODD, op_reply=f'[{{"candidate": "C1", "op": "UPDATE", "id": "E1", "text": "{ODD}"}}]')
    learner = Learner(llm, store, LearnConfig(group_size=4, epochs=1, batch_size=1), tmp_path)
    learner.use_validation(_tasks(4))
    learner.learn_groups([Group("Double #1 please", "math.doubling", ["Answer: 0", "Answer: 2"], [0.0, 1.0])])
    # on both lessons' items the odd lesson fixes #1 and #3, the even one #2 and #4: a tie, so both stay
    assert sorted(e.text for e in store.all()) == sorted([EVEN, ODD]) and store.get(old.id) is not None
    log = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines()]
    (check,) = [r for r in log if r["type"] == "update_gate"]
    assert (check["accuracy_old"], check["accuracy_new"], check["update"]) == (0.5, 0.5, False)


def test_a_candidate_the_update_reply_garbles_is_judged_by_the_gate_not_lost(tmp_path):
    store = DictStore()
    store.add(EVEN, "math.doubling")
    llm = FactLLM(lesson_reply=ODD, op_reply='[{"candidate": "C1", "op": "UPDATE", "id": "E5", "text": "When ..., ..."}]')
    learner = Learner(llm, store, LearnConfig(group_size=4, epochs=1, batch_size=1), tmp_path)
    learner.use_validation(_tasks(4))
    learner.learn_groups([Group("Double #1 please", "math.doubling", ["Answer: 0", "Answer: 2"], [0.0, 1.0])])
    assert sorted(e.text for e in store.all()) == sorted([EVEN, ODD]) and learner.stats.skipped == 1
    no_gate = Learner(llm, DictStore(), LearnConfig(group_size=4, epochs=1, batch_size=1), tmp_path / "b")
    no_gate.store.add(EVEN, "math.doubling")
    no_gate.learn_groups([Group("Double #1 please", "math.doubling", ["Answer: 0", "Answer: 2"], [0.0, 1.0])])
    assert [e.text for e in no_gate.store.all()] == [EVEN]  # without a gate nothing judges it: skipped, as before
