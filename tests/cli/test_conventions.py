"""One CLI, one set of conventions: a walk over every command's --help and its parameters.

One flag per concept (--db with DSONET_DB, -k, --json, --node URL), one environment prefix
(DSONET_), exit codes 0 ok / 1 user error in one line / 2 usage, and no traceback for an
expected error. Runs without torch: importing a command must not load an extra.
"""

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dsonet.cli.main import cli
from test_docs import ALL


COMMANDS = dict(ALL)  # every command and subcommand, walked by tests/test_docs.py
LEAVES = {name: cmd for name, cmd in COMMANDS.items() if not isinstance(cmd, click.Group)}
# Commands that print data (not servers, not benchmarks that write their own JSON files, not the demo).
PRINTS_DATA = {"add", "search", "show", "delete", "export", "import", "stats", "keygen", "learn", "ask", "eval",
               "cluster up", "cluster down", "cluster status"}
TALKS_TO_A_NODE = {"add", "search", "show", "delete", "stats", "mcp", "proxy"}
# Names a library path must not go by: the concept is --db everywhere.
LIBRARY_ALIASES = {"--library", "--lib", "--database", "--library-path", "--db-path"}


def _options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option)]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_with_an_example(name):
    result = CliRunner().invoke(cli, [*name.split(), "--help"])
    assert result.exit_code == 0, result.output
    if name in LEAVES:
        assert "Example" in result.output, f"`dso {name} --help` needs an example"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_one_flag_per_concept(name):
    opts = {o: p for p in _options(LEAVES[name]) for o in p.opts}
    assert not LIBRARY_ALIASES & set(opts), f"`dso {name}`: the library path is --db"
    if "--db" in opts:
        assert opts["--db"].envvar == "DSONET_DB", f"`dso {name} --db` must read DSONET_DB"
    assert "--k" not in opts, f"`dso {name}`: the count of results is -k"
    if "-k" in opts:
        assert opts["-k"].name == "k"
    if name in PRINTS_DATA:
        assert "--json" in opts and opts["--json"].is_flag, f"`dso {name}` prints data: it needs --json"
    if name in TALKS_TO_A_NODE:
        assert "--node" in opts and opts["--node"].envvar == "DSONET_NODE", f"`dso {name}` needs --node URL"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_one_environment_prefix(name):
    for p in _options(LEAVES[name]):
        for env in [p.envvar] if isinstance(p.envvar, str) else (p.envvar or []):
            assert env.startswith("DSONET_"), f"`dso {name} {p.opts[0]}` reads {env}; use the DSONET_ prefix"
    assert cli.context_settings.get("auto_envvar_prefix") is None


def test_keygen_node_start_and_db_share_one_home():
    from dsonet.cli.options import DEFAULT_DB, DEFAULT_KEY, HOME

    keygen = {p.name: p for p in LEAVES["keygen"].params}
    start = {p.name: p for p in LEAVES["node start"].params}
    assert keygen["path"].default == DEFAULT_KEY and DEFAULT_KEY.parent == HOME
    assert start["data_dir"].default == HOME and DEFAULT_DB.parent == HOME  # node.key + library.sqlite in it


@pytest.fixture
def db(tmp_path):
    """A library file with its profile bound (a test encoder), so opening it loads no model."""
    from dsonet.library import Library

    sys.path.insert(0, str(Path(__file__).parents[1] / "library"))
    from lib_helpers import HashEncoder

    path = tmp_path / "lib.sqlite"
    with Library(path, encoder=HashEncoder()) as lib:
        lib.add("When a graph is sparse, store it as adjacency lists", "code")
    return path


def _one_line_error(result, says: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and says in lines[0], result.output


def test_a_user_error_exits_1_with_one_line_and_no_traceback(db):
    _one_line_error(CliRunner().invoke(cli, ["search", "anything", "--node", "http://127.0.0.1:9"]), "127.0.0.1:9")
    _one_line_error(CliRunner().invoke(cli, ["show", "abc", "--db", str(db)]), "at least 8 characters")
    _one_line_error(CliRunner().invoke(cli, ["delete", "0123456789ab", "--db", str(db)]), "no such experience")
    _one_line_error(CliRunner().invoke(cli, ["import", str(db), "--db", str(db)]), str(db))


def test_the_default_encoder_adds_and_searches_without_torch(tmp_path):
    """`dso add` and `dso search` with torch and sentence-transformers unimportable: the default
    encoder runs in numpy on weights the core ships (`dsonet.encoders.minilm_numpy`)."""
    db = str(tmp_path / "new.sqlite")
    block = "import sys; sys.modules.update(dict.fromkeys(['torch', 'transformers', 'sentence_transformers']))"
    outputs = []
    for args in (["add", "When a ratio is asked, simplify the fraction first.", "--db", db],
                 ["search", "How do I simplify a ratio?", "--min-similarity", "0.3", "--json", "--db", db]):
        run = subprocess.run([sys.executable, "-c", f"{block}\nfrom dsonet.cli.main import cli\ncli({args!r})"],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        outputs.append(run.stdout)
    assert "simplify the fraction first" in outputs[1]


def test_usage_errors_exit_2():
    assert CliRunner().invoke(cli, ["search"]).exit_code == 2  # missing QUERY
    assert CliRunner().invoke(cli, ["search", "q", "-k", "0"]).exit_code == 2
    assert CliRunner().invoke(cli, ["no-such-command"]).exit_code == 2


def test_the_db_option_reads_dsonet_db(db, monkeypatch):
    monkeypatch.setenv("DSONET_DB", str(db))
    result = CliRunner().invoke(cli, ["stats", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["experiences"] == 1


def test_servers_refuse_bad_addresses_before_starting():
    assert CliRunner().invoke(cli, ["proxy", "--upstream", "localhost:8000"]).exit_code == 2
    result = CliRunner().invoke(cli, ["proxy", "--upstream", "http://127.0.0.1:8000/v1", "--host", "0.0.0.0"])
    assert result.exit_code == 1 and "needs --token" in result.output
    result = CliRunner().invoke(cli, ["mcp", "--transport", "http", "--host", "0.0.0.0"])
    assert result.exit_code == 1 and "needs --token" in result.output
    result = CliRunner().invoke(cli, ["proxy", "--upstream", "http://127.0.0.1:8000/v1", "--reflect"])
    assert result.exit_code == 2 and "give --learn too" in result.output
