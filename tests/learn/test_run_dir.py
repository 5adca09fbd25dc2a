import json

import pytest

from dsonet.learn.run_dir import LearnError, RunDir, Stats

IDENTITY = {"prompts_version": 3, "config": {"group_size": 5}, "reflector": "scripted", "task": "gsm8k", "n_tasks": 8}


def test_a_saved_step_resumes_with_its_counts_and_added_lessons(tmp_path):
    stats = Stats(batches=2, rollouts=10, reward_sum=4.0, operations={"ADD": 1, "UPDATE": 0, "DELETE": 0, "NONE": 2})
    RunDir(tmp_path).save(IDENTITY, 2, stats, {0: ["exp-a"]})
    resume = RunDir(tmp_path).resume(IDENTITY)
    assert (resume.next, resume.stats, resume.added) == (2, stats, {0: ["exp-a"]})


def test_a_directory_holding_another_runs_settings_is_refused(tmp_path):
    RunDir(tmp_path).save(IDENTITY, 1, Stats(), {})
    with pytest.raises(LearnError, match="other settings.*new --run-dir"):
        RunDir(tmp_path).resume({**IDENTITY, "task": "aiw"})


def test_the_log_is_one_json_object_a_line_and_no_directory_keeps_nothing(tmp_path):
    run = RunDir(tmp_path / "run")
    run.log("rollout", reward=1.0)
    run.log("skipped", reason="too long")
    lines = (tmp_path / "run" / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["rollout", "skipped"]
    nowhere = RunDir(None)
    nowhere.log("rollout", reward=1.0)
    nowhere.save(IDENTITY, 1, Stats(), {})
    assert nowhere.resume(IDENTITY).next == 0
