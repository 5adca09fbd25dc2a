import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import dsonet.cli.library
from dsonet.cli.main import cli
from dsonet.identity import NodeIdentity
from dsonet.library import Library

LESSONS = [
    ("When a ratio is given, write both parts as multiples of one unknown", "math.ratio"),
    ("When a speed and a time are given, multiply them to get the distance", "math.rates"),
    ("When a graph is sparse, store it as adjacency lists", "code.graphs"),
]


def run(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout  # stderr carries model-loading progress


@pytest.mark.slow
def test_add_search_show_delete_through_the_cli_with_the_default_encoder(tmp_path):
    db = tmp_path / "lib.sqlite"
    ids = [run("add", text, "--domain", domain, "--db", db).strip() for text, domain in LESSONS]
    hits = [json.loads(line) for line in run("search", "A car drives 60 km/h for 3 hours. How far does it go?",
                                             "--min-similarity", "0.2", "--json", "--db", db).splitlines()]
    assert hits[0]["id"] == ids[1]  # the distance lesson is nearest
    shown = json.loads(run("show", ids[0][:10], "--db", db, "--json"))
    assert shown["text"] == LESSONS[0][0]
    assert shown["copies"][0]["sign_bytes"] > 0 and (shown["copies"][0]["uses"], shown["copies"][0]["helped"]) == (0, 0)
    run("delete", ids[2][:12], "--db", db)
    with Library(db) as lib:
        assert len(lib) == 2 and lib.tombstones() == [ids[2]]
    assert json.loads(run("stats", "--db", db, "--json"))["experiences"] == 2


@pytest.mark.slow
def test_an_empty_search_prints_nothing_and_says_why_on_stderr_quoting_no_lesson(tmp_path):
    db = tmp_path / "lib.sqlite"
    search = ["search", "How do I undo my last git commit?", "--db", str(db)]
    Library(db).close()  # an empty library (a search never creates one)
    empty = CliRunner().invoke(cli, search, catch_exceptions=False)
    assert empty.stdout == "" and empty.stderr.splitlines()[-1].startswith("no lesson above 0.")
    assert "the library holds no lesson to score" in empty.stderr
    run("add", LESSONS[0][0], "--domain", LESSONS[0][1], "--db", db)
    for extra in ([], ["--json"]):  # --json stays JSON Lines: zero lines
        result = CliRunner().invoke(cli, search + extra, catch_exceptions=False)
        assert result.exit_code == 0 and result.stdout == ""
        assert re.fullmatch(r"no lesson above 0\.\d{3}; the closest scored -?0\.\d{3} \(--min-similarity or "
                            r"DSONET_MIN_SIMILARITY lowers the threshold\)", result.stderr.splitlines()[-1])
        assert LESSONS[0][0] not in result.stderr
    lowered = CliRunner().invoke(cli, search + ["--json"], env={"DSONET_MIN_SIMILARITY": "-1"}, catch_exceptions=False)
    assert [json.loads(line)["text"] for line in lowered.stdout.splitlines()] == [LESSONS[0][0]]


@pytest.mark.slow
def test_export_import_round_trip_jsonl_and_signed_batch(tmp_path):
    src = tmp_path / "a.sqlite"
    for text, domain in LESSONS:
        run("add", text, "--domain", domain, "--db", src)
    key = tmp_path / "node.key"
    NodeIdentity.generate().save(key)
    run("export", tmp_path / "out.jsonl", "--db", src)
    run("export", tmp_path / "out.msgpack", "--format", "msgpack", "--key", key, "--db", src)
    run("import", tmp_path / "out.jsonl", "--db", tmp_path / "b.sqlite")
    run("import", tmp_path / "out.msgpack", "--db", tmp_path / "c.sqlite")
    run("import", tmp_path / "out.msgpack", "--encode-texts", "--db", tmp_path / "d.sqlite")
    with Library(src) as a, Library(tmp_path / "b.sqlite") as b, \
            Library(tmp_path / "c.sqlite") as c, Library(tmp_path / "d.sqlite") as d:
        assert a.all() == b.all()  # JSONL keeps every field
        content = [[(e.id, e.text, e.domain, e.confidence) for e in lib.all()] for lib in (a, c, d)]
        assert content[0] == content[1] == content[2]
        signer = NodeIdentity.load(key).node_id
        assert {e.provenance.node_id for e in c.all()} == {signer}  # a signed batch's rows are its signer's
        ids = [e.id for e in a.all()]
        np.testing.assert_allclose(b.vectors(ids), a.vectors(ids), atol=1e-6)  # JSONL carries the floats
        assert c.stats()["with_float_vector"] == 0  # a batch carries codes only ...
        np.testing.assert_allclose(d.vectors(ids), a.vectors(ids), atol=1e-5)  # ... unless its texts are encoded


def test_every_library_command_has_help_with_an_example():
    for name in ("add", "search", "show", "delete", "export", "import", "stats"):
        assert "Example" in run(name, "--help")


def test_the_library_commands_read_the_file_through_the_library_not_its_sql():
    """`dso show` and `dso delete` ask `Library.copies` and `Library.resolve`: the schema stays the library's."""
    source = Path(dsonet.cli.library.__file__).read_text()
    assert ".execute(" not in source and ".db." not in source
