"""`dso add --scope`, `dso search --scope/--python`, `dso show`: a lesson's scope from the shell."""

import json
import sys

import pytest
from click.testing import CliRunner

import dsonet.encoders
from dsonet.cli.main import cli
from dsonet.library import Library
from dsonet.scope import Scope
from lib_helpers import HashEncoder

NEW = "When integrating samples, use np.trapezoid(z, x), not np.trapz"


@pytest.fixture(autouse=True)
def hash_encoder(monkeypatch):
    monkeypatch.setattr(dsonet.encoders, "default_encoder", HashEncoder)


def _run(*args, code=0):
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def test_a_scoped_lesson_is_shown_with_its_scope_and_held_back_where_it_contradicts(tmp_path):
    db = tmp_path / "lib.sqlite"
    exp_id = _run("add", NEW, "--scope", "numpy==2.4.6", "--scope", "python==3.12.1", "--db", db).stdout.strip()
    assert "scope numpy==2.4.6 python==3.12.1" in _run("show", exp_id[:12], "--db", db).stdout
    fits = _run("search", NEW, "--scope", "numpy==2.4.1", "--min-similarity", "0.9", "--db", db).stdout
    assert fits.strip().endswith("(numpy==2.4.6, python==3.12.1; fits)")
    line = json.loads(_run("search", NEW, "--scope", "numpy==2.4.1", "--min-similarity", "0.9", "--json",
                           "--db", db).stdout)
    assert (line["scope"], line["fit"]) == (["numpy==2.4.6", "python==3.12.1"], "fits")
    held = _run("search", NEW, "--scope", "numpy==1.26.4", "--min-similarity", "0.9", "--db", db)
    assert held.stdout == "" and f"held back {exp_id[:12]}: numpy 2.4.6 learned, 1.26.4 here" in held.stderr
    assert "no lesson above 0.900 holds in this environment: 1 held back" in held.stderr


def test_search_in_an_interpreters_environment(tmp_path):
    import numpy

    db = tmp_path / "lib.sqlite"
    _run("add", NEW, "--scope", "numpy==0.1.0", "--db", db)
    held = _run("search", NEW, "--python", sys.executable, "--min-similarity", "0.9", "--db", db)
    assert held.stdout == "" and f"0.1.0 learned, {numpy.__version__} here" in held.stderr


def test_a_malformed_scope_stores_nothing_and_says_how_to_write_it(tmp_path):
    db = tmp_path / "lib.sqlite"
    result = _run("add", NEW, "--scope", "numpy>=2", "--db", db, code=1)
    assert "'numpy>=2' is not name==version" in result.output and not db.exists()
    _run("add", "When a ratio is given, write both parts as multiples", "--db", db)
    _run("add", NEW, "--scope", "numpy==2.4.6", "--scope", "numpy==2.5.0", "--db", db, code=1)
    with Library(db) as lib:
        assert len(lib) == 1


def test_show_counts_a_scoped_lessons_outcomes_per_environment(tmp_path):
    db = tmp_path / "lib.sqlite"
    exp_id = _run("add", NEW, "--scope", "numpy==2.4.6", "--db", db).stdout.strip()
    with Library(db) as lib:
        for env, helped in (("numpy==2.4.1", True), ("numpy==2.4.1", False), ("numpy==2.4.1,pandas==2.0.3", True)):
            rid = lib.search(NEW, min_similarity=0.9, environment=Scope.parse([env], limit=2000)).retrieval_id
            lib.outcome(rid, helped=helped)
        lib.record_outcome(exp_id, False)  # no environment told
    shown = _run("show", exp_id[:12], "--db", db).stdout
    assert "used in numpy==2.4: 3 times, helped 2" in shown and "used in an environment not told: 1 times" in shown
    data = json.loads(_run("show", exp_id[:12], "--db", db, "--json").stdout)
    assert data["used_in"] == {"": {"uses": 1, "helped": 0}, "numpy==2.4": {"uses": 3, "helped": 2}}
