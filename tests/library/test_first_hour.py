"""The first hour of a new user (issue 39, item 2): each rough edge a clear error or the feature
expected, and nothing stored wrongly. The test encoder stands in for the default one."""

import json

import pytest
from click.testing import CliRunner

from dsonet.cli.main import cli
from dsonet.library import Library
from lib_helpers import HashEncoder

LESSON = "When a ratio is given, write both parts as multiples of one unknown"


@pytest.fixture(autouse=True)
def test_encoder(monkeypatch):
    monkeypatch.setattr("dsonet.encoders.default_encoder", HashEncoder)


def dso(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


def test_add_dash_reads_the_lesson_from_standard_input(tmp_path):
    db = tmp_path / "lib.sqlite"
    result = dso("add", "-", "--db", db, "--domain", "math.ratio", input=LESSON + "\n")
    assert result.exit_code == 0, result.output
    with Library(db) as lib:
        assert [e.text for e in lib.all()] == [LESSON] and lib.all()[0].id == result.stdout.strip()


@pytest.mark.parametrize("text", ["x", "ok", "-", "42 17"])
def test_a_text_with_no_words_to_act_on_is_refused_saying_what_a_lesson_needs(tmp_path, text):
    db = tmp_path / "lib.sqlite"
    result = dso("add", text, "--db", db, input="" if text == "-" else None)
    assert result.exit_code == 1 and "a lesson needs at least 3" in result.output
    assert "Traceback" not in result.output
    with Library(db) as lib:
        assert lib.all() == []


@pytest.mark.parametrize("command", [["search", "sparse graphs"], ["stats"], ["show", "3f2a9c0b"],
                                     ["delete", "3f2a9c0b"], ["export", "out.jsonl"]])
def test_a_read_command_never_creates_the_library_it_is_pointed_at(tmp_path, command):
    db = tmp_path / "no" / "such" / "lib.sqlite"
    result = dso(*[tmp_path / a if a == "out.jsonl" else a for a in command], "--db", db)
    assert result.exit_code == 1 and "no library there" in result.output and "dso add" in result.output
    assert not (tmp_path / "no").exists()


def test_add_creates_the_library_and_its_folder(tmp_path):
    db = tmp_path / "new" / "lib.sqlite"
    assert dso("add", LESSON, "--db", db).exit_code == 0
    assert json.loads(dso("stats", "--db", db, "--json").stdout)["experiences"] == 1
