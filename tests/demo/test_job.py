"""The demo's act on the job, on the real embedded models, sandbox, nodes, proxies and served models."""

import asyncio
import json
from dataclasses import asdict

import pytest

from dsonet.demo.job import JobConfig, job_record, run_job
from dsonet.demo.text import _job_lines
from dsonet.learn import drift
from dsonet.learn.sandbox import Sandbox


@pytest.mark.slow
def test_one_agents_error_learned_from_its_traffic_is_another_agents_first_try_pass(tmp_path):
    with Sandbox(preload=drift.PRELOAD) as sandbox:
        config = JobConfig(answers=tmp_path / "answers.sqlite")
        act = asyncio.run(run_job(config, sandbox, tmp_path / "job", echo=lambda _: None))
        again = asyncio.run(run_job(config, sandbox, tmp_path / "job-again", echo=lambda _: None))
    # a warm rerun replays the served models' sequences: the same story, nothing generated
    assert act.answers["generated"] > 0 and act.answers["from_cache"] == 0
    assert again.answers == {"generated": 0, "from_cache": act.answers["generated"]}
    assert (again.practice, again.lessons, again.before, again.after) == (act.practice, act.lessons, act.before,
                                                                          act.after)

    # agent A (the 1.5B) failed on the removed name, read the error line and wrote a line that ran
    assert "integrate.simps" in act.practice[0].code and "AttributeError" in act.practice[0].said
    assert act.practice[-1].passed and len(act.practice) >= 2
    # its proxy read that episode off the traffic and filed the lesson its error line spells out; nobody wrote it
    assert act.episodes == 1
    [lesson] = act.lessons
    assert lesson.startswith("When computing the integral") and "use integrate.simpson(" in lesson
    assert "not integrate.simps" in lesson and act.admitted == 1  # node B read it through DeltaSoup
    assert act.evidence == ((1, 1),)  # one episode, one agent: signed by node A, as node B holds it
    # agent B (the 0.5B) failed alone; with the lesson in the same prompt its first try passed
    assert not act.before.passed and not act.before.lessons
    assert act.after.passed and act.after.lessons == (lesson,) and "integrate.simpson(" in act.after.code
    assert act.shown
    assert json.loads(json.dumps(asdict(act)))["fact"] == "scipy-simps"
    text = "\n".join(_job_lines(act))
    assert "== On the job ==" in text and "first-try pass" in text and lesson in text
    record = job_record(act)  # what the HTML report shows
    assert record["question"] == act.question_b and record["lessons"] == [lesson]
    assert record["agent B again, the lesson injected"].endswith("-> passed")

