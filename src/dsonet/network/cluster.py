"""A NATS cluster with JetStream on one machine, for development and tests (`dso cluster up/down`).

Production sites each run one nats-server (the Debian package) joined into a cluster; this
module starts N of them on loopback so that a laptop or a CI runner sees the same topology:
a replicated JetStream stream survives one server stopping.

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
from dataclasses import asdict, dataclass
from pathlib import Path

from dsonet.errors import DsoError
from dsonet.network import certs
from dsonet.network.auth import ADMIN, ROUTE, Credentials, UserCreds, durable_for, render_accounts
from dsonet.network.jetstream import NatsConfig, NatsTransport

MAX_PAYLOAD = 8 * 1024 * 1024  # above codec.batch.MAX_BATCH_BYTES (4 MiB): any valid batch fits one message


class ClusterError(DsoError):
    """nats-server missing, a port taken, or a server that does not come up."""


@dataclass(frozen=True)
class ServerSpec:
    name: str
    client_port: int
    cluster_port: int
    http_port: int


@dataclass(frozen=True)
class ClusterSpec:
    state_dir: Path
    servers: tuple[ServerSpec, ...]
    host: str = "127.0.0.1"
    name: str = "dso"
    auth: bool = False  # users, passwords and per-subject permissions (`dso cluster up` turns it on)
    tls: bool = False  # TLS only, clients and routes
    tls_verify: bool = False  # and clients must show a certificate from the cluster's CA (mutual TLS)
    stream: str = "DSO"  # the stream `up` creates with auth, and the one node users are allowed
    subject_prefix: str = "dso"
    # each server's JetStream file store; the stream is kept to 3/4 of it (oldest dropped first), so it
    # never answers "insufficient resources": one member filling it stopped every other's publishes
    store_bytes: int = 2 * 2**30
    member_max_msgs: int = 10_000  # messages kept per member's subject (`NatsConfig.member_max_msgs`)

    @property
    def stream_max_bytes(self) -> int:
        return self.store_bytes * 3 // 4

    @property
    def urls(self) -> list[str]:
        scheme = "tls" if self.tls else "nats"
        return [f"{scheme}://{self.host}:{s.client_port}" for s in self.servers]

    @property
    def creds(self) -> Credentials:
        return Credentials(self.state_dir / "creds")

    @property
    def tls_dir(self) -> Path:
        return self.state_dir / "tls"

    @property
    def ca_file(self) -> Path | None:
        return self.tls_dir / "ca.pem" if self.tls else None

    def nats_config(self, user: str = ADMIN, **options) -> NatsConfig:
        """How a client reaches this cluster as ``user`` (its password read from the creds folder)."""
        login = {}
        if self.auth:
            login = {"user": user, "password": self.creds.user(user).password}
        if self.tls_verify:
            cert = self.client_cert(user)
            login |= {"tls_cert": cert.cert, "tls_key": cert.key}
        limits = {"max_bytes": self.stream_max_bytes, "member_max_msgs": self.member_max_msgs}
        return NatsConfig(servers=self.urls, stream=self.stream, subject_prefix=self.subject_prefix,
                          tls_ca=self.ca_file, **login, **(limits | options))

    def client_cert(self, user: str) -> certs.CertFiles:
        return certs.CertFiles(self.tls_dir / f"{user}.pem", self.tls_dir / f"{user}-key.pem")

    def node_options(self, node: UserCreds | None = None) -> list[str]:
        """The `dso node start` options, --nats apart, that connect a node as ``node``."""
        options = ["--stream", self.stream]
        if node is not None:
            options += ["--nats-user", node.user, "--nats-password-file", str(node.password_file)]
        if self.tls:
            options += ["--nats-tls-ca", str(self.ca_file)]
        if self.tls_verify and node is not None:
            cert = self.client_cert(node.user)
            options += ["--nats-tls-cert", str(cert.cert), "--nats-tls-key", str(cert.key)]
        return options

    def conf_path(self, server: ServerSpec) -> Path:
        return self.state_dir / f"{server.name}.conf"

    def pid_path(self, server: ServerSpec) -> Path:
        return self.state_dir / f"{server.name}.pid"

    def log_path(self, server: ServerSpec) -> Path:
        return self.state_dir / f"{server.name}.log"

    def save(self) -> None:
        doc = {"host": self.host, "name": self.name, "auth": self.auth, "tls": self.tls, "tls_verify": self.tls_verify,
               "stream": self.stream, "subject_prefix": self.subject_prefix, "store_bytes": self.store_bytes,
               "member_max_msgs": self.member_max_msgs, "servers": [asdict(s) for s in self.servers]}
        (self.state_dir / "cluster.json").write_text(json.dumps(doc, indent=2))

    @classmethod
    def load(cls, state_dir: str | Path) -> "ClusterSpec":
        state_dir = Path(state_dir).resolve()  # configs rewritten from it must name the same absolute paths
        try:
            doc = json.loads((state_dir / "cluster.json").read_text())
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {state_dir}; start one with `dso cluster up --state-dir {state_dir}`") from None
        servers = tuple(ServerSpec(**s) for s in doc["servers"])
        return cls(state_dir, servers, doc["host"], doc["name"], doc.get("auth", False), doc.get("tls", False),
                   doc.get("tls_verify", False), doc.get("stream", "DSO"), doc.get("subject_prefix", "dso"),
                   doc.get("store_bytes", 2 * 2**30), doc.get("member_max_msgs", 10_000))


def nats_server_binary() -> str:
    path = shutil.which("nats-server")
    if path is None:
        raise ClusterError("nats-server is not on PATH; install it with `apt-get install -y nats-server` (or `make system`)")
    return path


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports that were free a moment ago (the sockets stay open until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def make_spec(
    state_dir: str | Path,
    n: int = 3,
    client_port: int | None = 4222,
    cluster_port: int | None = 6222,
    http_port: int | None = 8222,
    host: str = "127.0.0.1",
    auth: bool = False,
    tls: bool = False,
    tls_verify: bool = False,
    store_bytes: int = 2 * 2**30,
    member_max_msgs: int = 10_000,
) -> ClusterSpec:
    """Server i uses base port + i; a base of None picks free ports instead. ``auth`` False: an open
    cluster, anyone who reaches a port may do anything (tests and benchmarks on loopback)."""
    if n < 1:
        raise ClusterError(f"n: a cluster needs at least 1 server, got {n}")
    spare = iter(free_ports(3 * n, host))
    ports = [
        [base + i if base is not None else next(spare) for i in range(n)]
        for base in (client_port, cluster_port, http_port)
    ]
    servers = tuple(ServerSpec(f"n{i + 1}", ports[0][i], ports[1][i], ports[2][i]) for i in range(n))
    return ClusterSpec(Path(state_dir).resolve(), servers, host, auth=auth, tls=tls or tls_verify,
                       tls_verify=tls_verify, store_bytes=store_bytes, member_max_msgs=member_max_msgs)


def render_config(spec: ClusterSpec, server: ServerSpec) -> str:
    store = spec.state_dir / server.name / "jetstream"
    login = f"{ROUTE}:{spec.creds.user(ROUTE).password}@" if spec.auth else ""
    routes = ", ".join(f"nats-route://{login}{spec.host}:{s.cluster_port}" for s in spec.servers if s != server)
    tls = _tls_block(spec, clients=False)
    cluster = ""
    if len(spec.servers) > 1:  # a one-server "cluster" must not declare routes or JetStream waits for peers
        route_auth = ""
        if spec.auth:  # without it anyone who reaches the cluster port joins as a server, past every permission
            route_auth = f'\n  authorization {{ user: "{ROUTE}", password: "{spec.creds.user(ROUTE).password}" }}'
        cluster = f"""
cluster {{
  name: {spec.name}
  listen: {spec.host}:{server.cluster_port}{route_auth}
  routes: [{routes}]{_indent(tls)}
}}"""
    accounts = f"\n{render_accounts(spec.creds, spec.stream, spec.subject_prefix)}" if spec.auth else ""
    return f"""# generated by dsonet.network.cluster; edit the spec, not this file
server_name: {server.name}
listen: {spec.host}:{server.client_port}
http: {spec.host}:{server.http_port}
max_payload: {MAX_PAYLOAD}
pid_file: "{spec.pid_path(server)}"
jetstream {{
  store_dir: "{store}"
  max_memory_store: 64MB
  max_file_store: {spec.store_bytes}
}}{_tls_block(spec, clients=True)}{cluster}{accounts}
"""


def _tls_block(spec: ClusterSpec, clients: bool) -> str:
    """Routes always check each other's certificate against the CA; clients only with tls_verify."""
    if not spec.tls:
        return ""
    verify = "\n  verify: true" if clients and spec.tls_verify else ""
    return f"""
tls {{
  cert_file: "{spec.tls_dir / 'server.pem'}"
  key_file: "{spec.tls_dir / 'server-key.pem'}"
  ca_file: "{spec.ca_file}"
  timeout: 5{verify}
}}"""


def _indent(block: str) -> str:
    return block.replace("\n", "\n  ")


def write_configs(spec: ClusterSpec) -> None:
    """Each server's config, readable by its owner only (it holds the users' passwords)."""
    for server in spec.servers:
        conf = spec.conf_path(server)
        conf.touch(mode=0o600)
        conf.chmod(0o600)
        conf.write_text(render_config(spec, server))


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
