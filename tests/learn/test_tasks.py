import json

import pytest

from dsonet.learn.tasks import (TaskError, gsm8k_tasks, jsonl_tasks, load_tasks, reasoning_gym_tasks,
                                telemetry_groups)


def test_gsm8k_tasks_verify_numeric_answers():
    ts = gsm8k_tasks(size=3)
    task = ts.tasks[0]
    assert len(ts.tasks) == 3 and task.domain == "math.word_problems"
    assert ts.verify(task, f"Reasoning... The answer is ${int(task.answer):,}.") == 1.0
    assert ts.verify(task, f"Answer: {int(task.answer) + 1}") == 0.0


def test_reasoning_gym_tasks_use_the_generators_score_on_the_extracted_answer():
    ts = reasoning_gym_tasks("chain_sum", size=4, seed=3, min_terms=2, max_terms=2, max_digits=1)
    task = ts.tasks[0]
    assert ts.verify(task, f"Adding up step by step.\nAnswer: {task.answer}") == 1.0
    assert ts.verify(task, "Answer: 1000") < 1.0
    assert task.domain == "reasoning.chain_sum"
    assert [t.question for t in reasoning_gym_tasks("chain_sum", size=4, seed=3, min_terms=2, max_terms=2,
                                                     max_digits=1).tasks] == [t.question for t in ts.tasks]


def test_unknown_generator_names_the_problem():
    with pytest.raises(TaskError, match="no_such_task"):
        reasoning_gym_tasks("no_such_task", size=2)


def test_jsonl_tasks_with_a_chosen_verifier(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [{"question": "Capital of France?", "answer": "Paris"},
                                                      {"question": "2+2?", "answer": "4"}]))
    ts = load_tasks(f"jsonl:{path}", verifier_name="exact")
    assert ts.verify(ts.tasks[0], "I think so.\nAnswer: paris.") == 1.0
    assert ts.verify(ts.tasks[0], "Answer: Lyon") == 0.0
    contains = jsonl_tasks(path, "contains")
    assert contains.verify(contains.tasks[0], "It is Paris, of course") == 1.0
    (tmp_path / "bad.jsonl").write_text('{"q": 1}\n')
    with pytest.raises(TaskError, match="bad.jsonl:1"):
        jsonl_tasks(tmp_path / "bad.jsonl")


def test_split_is_deterministic_and_disjoint():
    ts = gsm8k_tasks(size=20)
    train, test = ts.split(held_out=0.25, seed=1)
    assert len(train.tasks) == 15 and len(test.tasks) == 5
    assert not {t.id for t in train.tasks} & {t.id for t in test.tasks}
    assert [t.id for t in ts.split(held_out=0.25, seed=1)[1].tasks] == [t.id for t in test.tasks]


def test_telemetry_records_become_scored_groups():
    recs = [{"tool": "web.search", "input": "q1", "output": "ok", "reward": 1},
            {"tool": "web.search", "input": "q1", "output": "timeout", "reward": 0},
            {"tool": "calc", "input": "2+2", "output": "4", "reward": 1}]
    groups = telemetry_groups(recs)
    assert len(groups) == 2
    assert groups[0].domain == "tool.web_search" and groups[0].rewards == (1.0, 0.0) and groups[0].mixed
    assert not groups[1].mixed
    with pytest.raises(TaskError, match="reward"):
        telemetry_groups([{"tool": "x", "input": "y", "output": "z"}])


def test_reasoning_gym_prompts_ask_for_the_answer_alone_in_the_familys_shape():
    from dsonet.learn.tasks import family_splits

    ts = load_tasks("rg:fraction_simplification", size=3)
    assert ts.kind == "fraction" and ts.prompt(ts.tasks[0]).endswith("Answer: <numerator/denominator>")
    other = load_tasks("rg:spell_backward", size=2)
    assert other.kind == "text" and "Answer: <final answer>" in other.prompt(other.tasks[0])
    train, val, test = family_splits("letter_counting", [10, 10, 20])
    questions = [t.question for s in (train, val, test) for t in s.tasks]
    assert len(questions) == len(set(questions)) == 40  # deduplicated, disjoint
