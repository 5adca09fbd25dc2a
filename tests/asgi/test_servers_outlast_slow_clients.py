"""Every server the package starts (`dso node start`, `dso proxy`, `dso mcp --transport http`),
run as a user runs it with the usual fd limit of 1,024, answers every fresh client, typically within a
second, while twice its connection cap are held by slow clients (sending headers or a body a byte at a
time, reconnecting when shed), and right after they all let go.

Before (issue 24): the node, whose cap shed slow headers but not slow bodies, left fresh clients
unanswered while slow bodies filled it; `dso proxy` ran out of file descriptors and stopped
answering for good; `dso mcp` crashed on EMFILE and exited."""

import functools
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx
import pytest

from dsonet.asgi.protocol import MAX_CONNECTIONS
from dsonet.bench.proxy import free_port
from dsonet.encoders.registry import load_encoder
from dsonet.library import Library

FD_LIMIT = 1024  # the usual `ulimit -n`
HELD = 2 * MAX_CONNECTIONS
HOLD_S = 6.0
TRICKLE_S = 3.0  # a byte every 3 s, as the attacks of issue 24 sent
READY_S = 180
SLOW_HEADERS = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLOW_BODY = b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"


def _fd_limit(n: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


class SlowClients:
    """``n`` connections that send their request a byte every `TRICKLE_S` and reconnect when the server sheds
    them: ``kinds`` of requests in turn (slow headers, slow bodies)."""

    def __init__(self, port: int, n: int, kinds: tuple[bytes, ...]):
        self.port, self.n, self.kinds = port, n, kinds
        self.socks: list[socket.socket | None] = [None] * n
        self.reconnects = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self, i: int) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=1)
            s.sendall(self.kinds[i % len(self.kinds)])
            s.setblocking(False)
            self.socks[i] = s
        except OSError:
            self.socks[i] = None

    def _run(self) -> None:
        while not self.stop.is_set():
            for i, s in enumerate(self.socks):
                if self.stop.is_set():
                    return
                try:
                    if s is None or _answered(s):
                        raise OSError
                    s.send(b"a")
                except OSError:
                    if s is not None:
                        s.close()
                        self.reconnects += 1
                    self._connect(i)
            self.stop.wait(TRICKLE_S)

    def __enter__(self) -> "SlowClients":
        for i in range(self.n):
            self._connect(i)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)
        for s in self.socks:
            if s is not None:
                s.close()


def _answered(s: socket.socket) -> bool:
    """Whether the server answered (its 408) or closed this slow connection."""
    try:
        s.recv(1024)
    except BlockingIOError:
        return False
    return True


def _fresh(request) -> float:
    """Seconds a new client waits for its answer (a failed or late request: the assertion says so)."""
    t = time.perf_counter()
    response = request(httpx.Client(timeout=5))
    assert response.status_code < 500, response.text
    return time.perf_counter() - t


def _room_for_the_attack(held: int) -> None:
    """This process holds ``held`` sockets: raise its own fd limit where the machine's is the usual 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = held + 512
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"the fd limit's hard cap ({hard}) leaves no room for {held} slow connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def _hold(cmd: list[str], request, port: int, kinds: tuple[bytes, ...] = (SLOW_HEADERS, SLOW_BODY),
          fd_limit: int = FD_LIMIT, held: int = HELD, hold_s: float = HOLD_S) -> tuple[list[float], list[float], int]:
    """Start ``cmd`` under ``ulimit -n fd_limit``, hold ``held`` slow connections to it for ``hold_s``;
    fresh clients' waits during the hold and right after it, and how often the slow ones were shed."""
    _room_for_the_attack(held)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "dsonet.cli.main", *cmd, "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env, preexec_fn=functools.partial(_fd_limit, fd_limit))
    try:
        deadline = time.monotonic() + READY_S
        while b"listening on" not in proc.stderr.readline():
            assert proc.poll() is None and time.monotonic() < deadline, f"not ready: exit {proc.poll()}"
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep its stderr flowing
        with SlowClients(port, held, kinds) as slow:
            time.sleep(1.0)
            during = []
            end = time.monotonic() + hold_s
            while time.monotonic() < end:
                during.append(_fresh(request))
                time.sleep(0.5)
            reconnects = slow.reconnects
        after = [_fresh(request) for _ in range(3)]  # right after 1,024 connections closed at once
        assert proc.poll() is None, f"the server exited ({proc.returncode})"
        return during, after, reconnects
    finally:
        proc.terminate()
        proc.wait(30)


def _served_within_a_second(during: list[float], after: list[float], reconnects: int) -> None:
    """Every fresh request was answered (`_fresh` fails one the client's 5 s timeout cut: how a full table
    showed), the typical one well inside that timeout. The median, not the slowest, and half the timeout, not
    a stopwatch's second: on a shared 2-core machine under load single answers took 1-2 s while the server
    was not blocked; a full table shows as the whole 5 s."""
    assert reconnects > 0  # the slow clients were shed (and came back): the table really was full
    assert statistics.median(during) < 2.5, during
    assert statistics.median(after) < 2.5, after


def _node(tmp_path, port: int, token: list[str] = ()):
    cmd = ["node", "start", "--data-dir", str(tmp_path / "node"), "--encoder", "none", "--dim", "16",
           "--log-level", "WARNING", *token]
    return cmd, lambda c: c.get(f"http://127.0.0.1:{port}/stats", headers=AUTH if token else None)


def _proxy(tmp_path, port: int, token: list[str] = ()):
    Library(tmp_path / "lib.sqlite", encoder=load_encoder("wordllama")).close()  # the proxy reads, never creates
    cmd = ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--db", str(tmp_path / "lib.sqlite"),
           "--encoder", "wordllama", *token]
    return cmd, lambda c: c.get(f"http://127.0.0.1:{port}/health")


def _mcp(tmp_path, port: int):
    """Over a node that is down: no encoder to load, and the MCP SDK's own logging (rich tracebacks), as
    with the default encoder; wordllama's import would have set up plain logging first."""
    pytest.importorskip("mcp")
    cmd = ["mcp", "--transport", "http", "--node", "http://127.0.0.1:9", "--timeout", "1"]
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "fresh", "version": "1"}}}
    return cmd, lambda c: c.post(f"http://127.0.0.1:{port}/mcp", json=initialize,
                                 headers={"Accept": "application/json, text/event-stream"})


@pytest.mark.slow
def test_dso_node_start_serves_a_fresh_client_while_twice_its_cap_are_held(tmp_path):
    port = free_port()
    # slow bodies only, as the attack on the node did: its old cap shed slow headers, never slow bodies
    _served_within_a_second(*_hold(*_node(tmp_path, port), port, (SLOW_BODY,)))


@pytest.mark.slow
def test_dso_proxy_serves_a_fresh_client_while_twice_its_cap_are_held(tmp_path):
    port = free_port()
    _served_within_a_second(*_hold(*_proxy(tmp_path, port), port))


@pytest.mark.slow
def test_dso_mcp_over_http_serves_a_fresh_client_while_twice_its_cap_are_held(tmp_path):
    port = free_port()
    _served_within_a_second(*_hold(*_mcp(tmp_path, port), port))


@pytest.mark.parametrize("server", [_node, _proxy, _mcp], ids=["node", "proxy", "mcp"])
def test_every_server_outlives_running_out_of_file_descriptors(tmp_path, server):
    """Under ``ulimit -n 256`` (a cap of 192), 300 slow connections that reconnect when shed: accepts fail
    with EMFILE again and again, and the server keeps answering. Before, `dso mcp` exited with code 1: the
    rich handler that logged the failed accept needed a descriptor to render its traceback."""
    port = free_port()
    cmd, request = server(tmp_path, port)
    _served_within_a_second(*_hold(cmd, request, port, (SLOW_HEADERS,), fd_limit=256, held=300))


@pytest.mark.parametrize("server, path", [(_node, "/experiences"), (_proxy, "/v1/chat/completions")],
                         ids=["node", "proxy"])
def test_slow_bodies_from_clients_that_hold_the_token_are_cut_within_seconds(tmp_path, server, path):
    """60 clients holding the token send a body a byte every 3 s: each is cut (408) after its 10 s of grace,
    and comes back, while fresh clients are served. Before, the proxy held such bodies for their whole
    30 s deadline: an attack that held 300 of them for 30 s saw none closed."""
    port = free_port()
    slow = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{").encode()
    cmd, request = server(tmp_path, port, ["--token", TOKEN])
    during, after, reconnects = _hold(cmd, request, port, (slow,), held=60, hold_s=15.0)
    assert reconnects >= 60  # every slow body was cut at least once within the hold
    _served_within_a_second(during, after, reconnects)
