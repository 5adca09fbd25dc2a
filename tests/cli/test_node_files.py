"""`dso node start` on a damaged library file or a key others can read: one line, exit 1, no traceback."""

import os
import sqlite3
import subprocess
import sys
import types

import numpy as np
import pytest
from click.testing import CliRunner

from dsonet.cli.main import cli
from dsonet.codec import default_profile
from dsonet.identity import ALLOW_READABLE, NodeIdentity
from dsonet.library import Library
from dsonet.network.node import Node, NodeConfig, NodeError
from dsonet.network.transport import InProcessHub

DIM = 16
START = ["node", "start", "--encoder", "none", "--dim", str(DIM), "--port", "1", "--log-level", "WARNING"]


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A standalone node's data dir: its key and a library file holding a profile."""
    monkeypatch.delenv(ALLOW_READABLE, raising=False)
    NodeIdentity.generate().save(tmp_path / "node.key")
    Library(tmp_path / "library.sqlite", encoder=None, profile=default_profile(DIM, "none")).close()
    return tmp_path


def _one_line(output: str, *says: str) -> None:
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), output
    assert all(s in lines[0] for s in says), output


@pytest.mark.parametrize("damage, why", [
    (lambda p: os.truncate(p, 2000), "truncated"),
    (lambda p: p.write_bytes(b"\0" * 100 + p.read_bytes()[100:]), "not an SQLite header"),
    (lambda p: (p.unlink(), p.mkdir()), "a directory"),
    (lambda p: os.truncate(p, 0), "0 bytes"),
])
def test_node_start_on_a_damaged_library_says_which_file_and_what_to_do(data_dir, damage, why):
    library = data_dir / "library.sqlite"
    damage(library)
    result = CliRunner().invoke(cli, [*START, "--data-dir", str(data_dir)])
    assert result.exit_code == 1
    _one_line(result.output, f"{library} is damaged", why, "restore it from a backup", f"mv {library}")


def test_the_real_process_exits_1_with_one_line_on_stderr(data_dir):
    os.truncate(data_dir / "library.sqlite", 2000)
    done = subprocess.run([sys.executable, "-m", "dsonet.cli.main", *START, "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    _one_line(done.stderr, "is damaged (truncated")


def test_node_start_refuses_a_key_others_can_read(data_dir):
    (data_dir / "node.key").chmod(0o644)
    result = CliRunner().invoke(cli, [*START, "--data-dir", str(data_dir)])
    assert result.exit_code == 1
    _one_line(result.output, "mode 0644", f"chmod 600 {data_dir / 'node.key'}")


def test_a_node_on_a_stream_says_how_to_read_the_stream_again(data_dir):
    import asyncio

    os.truncate(data_dir / "library.sqlite", 0)
    on_stream = types.SimpleNamespace(stream="DSO", problem="")  # what a node asks of a JetStream transport
    with pytest.raises(NodeError) as caught:
        asyncio.run(Node.open(NodeConfig(data_dir, encoder=None, dim=DIM), on_stream))
    durable = f"node-{NodeIdentity.load(data_dir / 'node.key').node_id[:16]}"
    assert "is damaged (0 bytes" in str(caught.value) and f"nats consumer rm DSO {durable}" in str(caught.value)


def _flip_page(library, table: str) -> None:
    """64 bytes flipped at the start of ``table``'s first page: the file's header and length stay whole."""
    db = sqlite3.connect(library)
    (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    (page_size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    data = bytearray(library.read_bytes())
    start = (root - 1) * page_size
    data[start:start + 64] = bytes(b ^ 0xFF for b in data[start:start + 64])
    library.write_bytes(bytes(data))


@pytest.mark.parametrize("table", ["outbox", "deferred", "seen", "experiences"])
def test_node_start_on_a_page_damaged_past_the_header_exits_1_with_one_line(data_dir, table):
    """Before: a broken page of a table the library's open does not read (the outbox) ended the real process
    in a 77-line traceback once the node served, ``sqlite3.DatabaseError: database disk image is malformed``."""
    import asyncio

    async def write() -> None:
        node = await Node.open(NodeConfig(data_dir, encoder=None, dim=DIM, batch_interval_s=3600),
                               InProcessHub().transport())
        for i in range(20):
            await node.submit(f"When case {i} comes up, do step {i}.", "math", vector=_unit(i))
        await node.close()

    asyncio.run(write())
    library = data_dir / "library.sqlite"
    _flip_page(library, table)
    done = subprocess.run([sys.executable, "-m", "dsonet.cli.main", *START, "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    _one_line(done.stderr, f"{library} is damaged (", "malformed", "restore it from a backup", f"mv {library}")


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)
