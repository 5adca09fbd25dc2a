"""Every command has help, and the README's CLI reference names every command (sqlite-utils' habit)."""

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dsonet.cli.main import cli

README = (Path(__file__).parents[1] / "README.md").read_text()


def _commands(group: click.Group, ctx: click.Context, prefix: str = ""):
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, click.Context(cmd, parent=ctx), f"{prefix}{name} ")


ALL = list(_commands(cli, click.Context(cli)))


def test_every_registered_command_imports():
    assert all(cmd is not None for _, cmd in ALL)
    assert {"keygen", "bench", "bench codec"} <= {name for name, _ in ALL}


@pytest.mark.parametrize("name,cmd", ALL, ids=[n for n, _ in ALL])
def test_every_command_explains_itself(name, cmd):
    result = CliRunner().invoke(cli, [*name.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert cmd.help and len(cmd.help.strip()) > 40, f"`dso {name}` needs a real docstring"


@pytest.mark.parametrize("name", [n for n, _ in ALL], ids=[n for n, _ in ALL])
def test_readme_cli_reference_covers_every_command(name):
    assert f"dso {name}" in README, f"README's CLI reference does not mention `dso {name}`"


def test_readme_python_example_runs(tmp_path, monkeypatch):
    import re

    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks, "README has no Python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "library.sqlite").exists()


def test_dso_help_quick_start_shows_add_and_search():
    quick = CliRunner().invoke(cli, ["--help"]).output.split("Quick start:")[1]
    assert "dso add " in quick and "dso search " in quick


def test_readme_mcp_config_launches_dso_by_absolute_path_and_gives_the_http_snippet():
    import json
    import re

    configs = [json.loads(b)["mcpServers"]["dsonet"] for b in re.findall(r"```json\n(.*?)```", README, re.S)
               if '"mcpServers"' in b]
    stdio = [c for c in configs if "command" in c]
    assert stdio and all(c["command"].startswith("/") and c["command"].endswith("/bin/dso") for c in stdio)
    assert any(c.get("url", "").endswith("/mcp") and "Authorization" in c.get("headers", {}) for c in configs)


def test_readme_documents_the_busy_port_exit_code():
    from dsonet.asgi import PortInUse

    assert f"{PortInUse.exit_code} a server command" in README
