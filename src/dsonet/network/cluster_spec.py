"""What a local NATS cluster is (`dsonet.network.cluster` runs it): its servers' names and ports,
auth and TLS, stream limits, and where its state lives; saved as ``cluster.json`` in the state
directory, and how a client or `dso node start` reaches it.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from dsonet.errors import DsoError
from dsonet.network import certs
from dsonet.network.auth import ADMIN, Credentials, UserCreds
from dsonet.network.jetstream import NatsConfig


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
