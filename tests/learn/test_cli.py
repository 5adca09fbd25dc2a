"""`dso learn / ask / eval` end to end through an OpenAI-compatible endpoint on localhost, checked
through the Python API (the server is scripted: the subject is the commands' wiring)."""

import json

import pytest
from click.testing import CliRunner

from dsonet.cli.main import cli
from dsonet.library import Library

from .test_openai_llm import _Server

LESSON = "When the calculator tool returns an error, retry once with the expression simplified."


def _reply(prompt: str) -> str:
    if prompt.startswith("Several attempts"):
        return f"Lessons:\n1. {LESSON}"
    if "What is 6 * 7" in prompt:
        return "Answer: 42"
    return "no idea"


@pytest.mark.slow
def test_learn_from_telemetry_then_ask_and_eval(tmp_path):
    server = _Server(delay=0.0, reply=_reply)
    try:
        telemetry = tmp_path / "tools.jsonl"
        telemetry.write_text("\n".join(json.dumps(r) for r in [
            {"tool": "calc", "input": "(2+3)*4", "output": "20", "reward": 1},
            {"tool": "calc", "input": "(2+3)*4", "output": "error: parse", "reward": 0}]))
        lib_path = tmp_path / "lib.db"
        llm = ["--llm", server.url, "--model", "tiny"]
        result = CliRunner().invoke(cli, ["learn", "--telemetry", str(telemetry), "--db", str(lib_path), *llm])
        assert result.exit_code == 0, result.output
        assert "ADD 1" in result.output
        with Library(lib_path) as lib:  # the CLI made it with the default encoder
            assert [(e.text, e.domain) for e in lib.all()] == [(LESSON, "tool.calc")]

        asked = CliRunner().invoke(cli, ["ask", "The calculator tool returned an error, what now?", "--db",
                                         str(lib_path), "--show-prompt", *llm])
        assert asked.exit_code == 0, asked.output
        assert f"- {LESSON}" in asked.output and "[system]" in asked.output

        fed = CliRunner().invoke(cli, ["ask", "The calculator tool returned an error, what now?", "--db",
                                       str(lib_path), "--feedback", "ask", *llm], input="y\n")
        assert fed.exit_code == 0 and "recorded helped on 1 lesson" in fed.output
        with Library(lib_path) as lib:
            assert lib.outcomes(lib.all()[0].id) == (1, 1)

        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text("\n".join(json.dumps({"question": q, "answer": a})
                                   for q, a in [("What is 6 * 7?", "42"), ("What is 2 + 2?", "4")] * 5))
        ev = CliRunner().invoke(cli, ["eval", f"jsonl:{tasks}", "--db", str(lib_path), "--held-out", "0.5",
                                      "--json", *llm])
        assert ev.exit_code == 0, ev.output
        row = json.loads(ev.output.strip().splitlines()[-1])
        assert row["n_eval"] == 5 and row["accuracy_with"] == row["accuracy_without"] and row["coverage"] == 0
        assert 0 < row["accuracy_without"] < 1
    finally:
        server.close()


def test_learn_without_a_task_says_what_to_give(tmp_path):
    result = CliRunner().invoke(cli, ["learn", "--db", str(tmp_path / "lib.db")])
    assert result.exit_code != 0 and "--telemetry" in result.output


def test_eval_needs_an_existing_library():
    result = CliRunner().invoke(cli, ["eval", "rg:chain_sum", "--db", "/nonexistent.db"])
    assert result.exit_code != 0 and "does not exist" in result.output


@pytest.mark.slow
def test_ask_uses_the_calibrated_two_stage_threshold_and_says_why_when_nothing_passes(tmp_path):
    from dsonet.library.policy import default_min_similarity

    lib_path = tmp_path / "lib.db"
    with Library(lib_path) as lib:
        lib.add("When a ratio is asked, simplify the fraction by the greatest common divisor.", domain="math.ratios")
        threshold = default_min_similarity(lib.rescorer.id)  # a text search's second stage
    server = _Server(delay=0.0, reply=lambda prompt: "Answer: 2:3")
    try:
        llm = ["--db", str(lib_path), "--llm", server.url, "--model", "tiny", "--json"]
        found = json.loads(CliRunner().invoke(cli, ["ask", "Simplify the ratio 12:18.", *llm]).stdout)
        assert [lesson["score"] for lesson in found["lessons"]] and found["lessons"][0]["score"] >= threshold
        assert found["threshold"] == threshold != default_min_similarity()  # no flag, no env: the second stage's
        empty = CliRunner().invoke(cli, ["ask", "How do I undo my last git commit?", *llm[:-1]])
        assert empty.exit_code == 0 and empty.stdout.strip() == "Answer: 2:3"
        assert empty.stderr.splitlines()[-1].startswith(f"no lesson above {threshold:.3f}; the closest")
    finally:
        server.close()
