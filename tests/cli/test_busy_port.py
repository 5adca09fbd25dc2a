"""A server command whose port another process holds exits with the documented code 3, saying which
port, before it loads anything (README: CLI reference)."""

import socket

import pytest
from click.testing import CliRunner

from dsonet.asgi import PortInUse
from dsonet.cli.main import cli


@pytest.fixture
def busy_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


@pytest.mark.parametrize("command", [
    ["node", "start", "--data-dir", "{tmp}/node", "--encoder", "none", "--dim", "384"],
    ["mcp", "--transport", "http", "--db", "{tmp}/lib.sqlite"],
    ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--db", "{tmp}/lib.sqlite"],
])
def test_a_busy_port_exits_3_naming_the_port_before_anything_loads(tmp_path, busy_port, command):
    args = [a.format(tmp=tmp_path) for a in command] + ["--port", str(busy_port)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == PortInUse.exit_code == 3, result.output
    assert f"127.0.0.1:{busy_port} is in use" in result.output and "another --port" in result.output
    assert not (tmp_path / "lib.sqlite").exists() and not (tmp_path / "node" / "library.sqlite").exists()
