"""A NATS cluster with JetStream on one machine, for development and tests (`dso cluster up/down`).

Production sites each run one nats-server (the Debian package) joined into a cluster; this
module starts N of them on loopback so that a laptop or a CI runner sees the same topology:
a replicated JetStream stream survives one server stopping. The spec (servers, ports, auth, tls):
`dsonet.network.cluster_spec`; each server's config rendered from it: `dsonet.network.cluster_config`.

With ``auth`` (the default of `dso cluster up`) every client must log in, the routes between
servers too, and a node may only do what a node needs (`dsonet.network.auth` lists it); `up`
creates the stream with the admin user, and `add_node` gives a node its user. With ``tls`` the
servers speak TLS only, to clients and to each other, with certificates from a private CA
(`dsonet.network.certs`); with ``tls_verify`` as well, every client must show a certificate from
that CA (mutual TLS), which `prepare` and `add_node` issue.

Everything lives in a state directory::

    cluster.json           the spec (names, ports, auth, tls), read back by `down`, `status`, `add-node`
    n1.conf n1.pid n1.log  one config (0600: it holds the passwords), pid file and log per server
    n1/jetstream/          the server's JetStream store
    creds/USER.password    with auth: one password per user (admin, route, node-<id16>), 0600
    tls/ca.pem ...         with tls: the CA (give ca.pem to every node) and the servers' certificate;
                           with tls_verify: USER.pem and USER-key.pem, one client certificate per user
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from dsonet.network import certs
from dsonet.network.auth import ADMIN, ROUTE, UserCreds, durable_for
from dsonet.network.cluster_config import write_configs
from dsonet.network.cluster_spec import ClusterError, ClusterSpec, ServerSpec
from dsonet.network.jetstream import NatsTransport


def nats_server_binary() -> str:
    path = shutil.which("nats-server")
    if path is None:
        raise ClusterError("nats-server is not on PATH; install it with `apt-get install -y nats-server` (or `make system`)")
    return path


def prepare(spec: ClusterSpec) -> None:
    """The state dir, with the admin's and the routes' passwords and the TLS certificates where asked
    (passwords and CA kept when they exist: `up` after `down` keeps every client's credentials)."""
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    if spec.auth:
        spec.creds.user(ADMIN, create=True)
        spec.creds.user(ROUTE, create=True)
    if spec.tls:  # the CA stays (nodes hold its ca.pem); the servers' certificate follows --host
        ca = _ca(spec)
        if not ca.cert.exists():
            ca = certs.make_ca(spec.tls_dir)
        certs.issue(ca, spec.tls_dir, "server", hosts=sorted({spec.host, "127.0.0.1", "localhost"}))
        if spec.tls_verify and not spec.client_cert(ADMIN).cert.exists():
            certs.issue(ca, spec.tls_dir, ADMIN)
    spec.save()
    write_configs(spec)


def start_server(spec: ClusterSpec, server: ServerSpec) -> int:
    """Start one server in the background (its own session, so it outlives the caller); return its pid."""
    binary = nats_server_binary()
    conf = spec.conf_path(server)
    log = open(spec.log_path(server), "ab")
    try:
        proc = subprocess.Popen([binary, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()
    spec.pid_path(server).write_text(str(proc.pid))  # the server rewrites it; written now so `down` never misses it
    return proc.pid


def up(spec: ClusterSpec, timeout_s: float = 30.0) -> ClusterSpec:
    """Start every server of the spec and wait until JetStream answers on each; with auth, create
    the stream as the admin (node users may not)."""
    for server in spec.servers:
        if _alive(read_pid(spec, server)):
            raise ClusterError(f"{server.name} already runs (pid file {spec.pid_path(server)}); `dso cluster down` first")
        if _port_open(spec.host, server.client_port):
            raise ClusterError(f"port {server.client_port} on {spec.host} is taken; choose another with --client-port")
    prepare(spec)
    for server in spec.servers:
        start_server(spec, server)
    wait_ready(spec, timeout_s)
    if spec.auth:
        _in_thread(_create_stream(spec, timeout_s))
    return spec


async def _create_stream(spec: ClusterSpec, timeout_s: float) -> None:
    config = spec.nats_config(ADMIN, replicas=min(3, len(spec.servers)), connect_timeout_s=timeout_s)
    transport = await NatsTransport.connect(config, name="dso-cluster-admin")
    try:  # a stream made before its limits were set (or with others) gets this spec's
        await transport.js.update_stream(config.stream_config())
    finally:
        await transport.close()


def add_node(spec: ClusterSpec, node_id: str) -> UserCreds:
    """Give the node ``node_id`` its user (a new password, or the one it has) and make the running
    servers load it; returns the user and its password file."""
    _require_auth(spec)
    node = spec.creds.user(durable_for(node_id), create=True)
    if spec.tls_verify and not spec.client_cert(node.user).cert.exists():
        certs.issue(_ca(spec), spec.tls_dir, node.user)
    _reconfigure(spec)
    return node


def remove_node(spec: ClusterSpec, node_id: str) -> bool:
    """Revoke a node's user: the servers refuse its logins from now on (and close its connections)."""
    _require_auth(spec)
    user = durable_for(node_id)
    removed = spec.creds.remove(user)
    cert = spec.client_cert(user)  # still signed by the CA, but useless without the password
    cert.cert.unlink(missing_ok=True)
    cert.key.unlink(missing_ok=True)
    _reconfigure(spec)
    return removed


def _ca(spec: ClusterSpec) -> certs.CertFiles:
    return certs.CertFiles(spec.tls_dir / "ca.pem", spec.tls_dir / "ca-key.pem")


def _require_auth(spec: ClusterSpec) -> None:
    if not spec.auth:
        raise ClusterError(f"the cluster in {spec.state_dir} is open (started with --open): it has no users; "
                           "start it again without --open to give nodes their own")


def _reconfigure(spec: ClusterSpec) -> None:
    write_configs(spec)
    for server in spec.servers:  # SIGHUP: nats-server reloads its config, users and permissions included
        pid = read_pid(spec, server)
        if not _alive(pid):
            continue
        before = _config_load_time(spec.host, server.http_port)
        os.kill(pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while _config_load_time(spec.host, server.http_port) == before:
            if time.monotonic() > deadline:
                raise ClusterError(f"{server.name} did not reload {spec.conf_path(server)}; its log ends:\n"
                                   f"{_tail(spec.log_path(server))}")
            time.sleep(0.05)


def _in_thread(coro) -> None:
    """Run a coroutine to its end on a loop of its own (the caller may be inside one already)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(coro)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def wait_ready(spec: ClusterSpec, timeout_s: float = 30.0, servers: list[ServerSpec] | None = None) -> None:
    """Block until each server's /healthz reports JetStream ready (meta leader elected)."""
    deadline = time.monotonic() + timeout_s
    for server in servers or spec.servers:
        while not _healthy(spec.host, server.http_port):
            if time.monotonic() > deadline:
                tail = _tail(spec.log_path(server))
                raise ClusterError(f"{server.name} is not ready after {timeout_s:.0f} s; its log ends:\n{tail}")
            time.sleep(0.1)


def stop_server(spec: ClusterSpec, server: ServerSpec, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> bool:
    """Signal one server and wait for it to exit; SIGKILL if it lingers. False if it was not running."""
    pid = read_pid(spec, server)
    if not _alive(pid):
        spec.pid_path(server).unlink(missing_ok=True)
        return False
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.05)
    spec.pid_path(server).unlink(missing_ok=True)
    return True


def down(state_dir: str | Path, remove: bool = False) -> list[str]:
    """Stop every server of the cluster in state_dir; return the names that were running."""
    spec = ClusterSpec.load(state_dir)
    stopped = [s.name for s in spec.servers if stop_server(spec, s)]
    if remove:
        shutil.rmtree(spec.state_dir, ignore_errors=True)
    return stopped


def status(spec: ClusterSpec) -> list[dict]:
    return [
        {"name": s.name, "pid": read_pid(spec, s), "running": _alive(read_pid(spec, s)),
         "ready": _healthy(spec.host, s.http_port), "url": url}
        for s, url in zip(spec.servers, spec.urls)
    ]


def read_pid(spec: ClusterSpec, server: ServerSpec) -> int | None:
    try:
        return int(spec.pid_path(server).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap our own child so it does not linger as a zombie
        if waited == pid:
            return False
    except ChildProcessError:
        pass  # not our child: fall through to the signal probe
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def _config_load_time(host: str, http_port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://{host}:{http_port}/varz", timeout=1.0) as resp:
            return json.loads(resp.read()).get("config_load_time")
    except (OSError, ValueError):
        return None


def _healthy(host: str, http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{http_port}/healthz", timeout=1.0) as resp:
            return resp.status == 200
    except OSError:
        return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
