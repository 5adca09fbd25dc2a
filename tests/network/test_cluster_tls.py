"""A TLS cluster (`dso cluster up --tls`): nodes that trust the cluster's CA log in and exchange
batches over TLS, the servers' routes run TLS too, and a client that does not trust the CA is
refused at once; the CLI path end to end (cluster up, add-node, node start with a password file)."""

import asyncio
import json
import ssl

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from dsonet.cli.main import cli
from dsonet.identity import NodeIdentity
from dsonet.network import cluster
from dsonet.network.cluster_spec import ClusterSpec, make_spec
from dsonet.network.auth import ADMIN
from dsonet.network.jetstream import NatsConfig, NatsTransport
from dsonet.network.procs import NodeProcess
from dsonet.network.transport import TransportError, subject_for

pytestmark = pytest.mark.nats


@pytest.fixture
def tls_cluster(tmp_path):
    spec = make_spec(tmp_path / "tls", n=3, client_port=None, cluster_port=None, http_port=None,
                             auth=True, tls=True)
    try:
        yield cluster.up(spec)  # the stream has 3 replicas: the routes came up over TLS
    finally:
        for server in spec.servers:
            cluster.stop_server(spec, server, timeout_s=5)


def test_nodes_that_trust_the_ca_exchange_batches_over_tls_and_others_are_refused(tls_cluster):
    users = [cluster.add_node(tls_cluster, NodeIdentity.from_seed(s).node_id) for s in (b"tls-a", b"tls-b")]
    assert all(url.startswith("tls://") for url in tls_cluster.urls)

    async def main():
        a, b = [await NatsTransport.connect(tls_cluster.nats_config(u.user), name=u.user) for u in users]
        got = []

        async def handler(chunk):
            got.extend(m.data for m in chunk)

        await b.subscribe(users[1].user, handler)
        await a.publish(b"over tls", subject_for("dso", "batch", users[0].user))
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.05)
        replicas = (await a.js.stream_info("DSO")).config.num_replicas
        await a.close()
        await b.close()
        try:  # the system's roots do not know the cluster's CA
            await NatsTransport.connect(NatsConfig(servers=tls_cluster.urls, user=users[0].user,
                                                   password=users[0].password, connect_timeout_s=20))
            untrusted = "connected"
        except TransportError as exc:
            untrusted = str(exc)
        return got, replicas, untrusted

    got, replicas, untrusted = asyncio.run(main())
    assert got == [b"over tls"] and replicas == 3
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted


def test_a_client_certificate_is_shown_when_given(tmp_path):
    from dsonet.network import certs

    ca = certs.make_ca(tmp_path)
    client = certs.issue(ca, tmp_path, "node-1")
    context = NatsConfig(servers=["nats://127.0.0.1:4222"], tls_ca=ca.cert, tls_cert=client.cert,
                         tls_key=client.key).ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    with pytest.raises(TransportError, match="tls_cert and tls_key go together"):
        NatsConfig(tls_cert=client.cert)
    assert NatsConfig().ssl_context() is None


@pytest.mark.slow
def test_a_node_process_logs_in_with_its_password_file_over_tls(tmp_path):
    from dsonet.network.cluster_spec import free_ports

    state = tmp_path / "nats"
    client, route, http = free_ports(3)
    runner = CliRunner()
    up = runner.invoke(cli, ["cluster", "up", "--state-dir", str(state), "--servers", "1", "--client-port", str(client),
                             "--cluster-port", str(route), "--http-port", str(http), "--tls", "--json"])
    assert up.exit_code == 0, up.output
    proc = None
    try:
        key = tmp_path / "a" / "node.key"
        NodeIdentity.generate().save(key)
        added = runner.invoke(cli, ["cluster", "add-node", "--state-dir", str(state), "--key", str(key), "--json"])
        assert added.exit_code == 0, added.output
        options = json.loads(added.output)["node_start_options"]
        assert options[:2] == ["--nats", json.loads(up.output)["urls"][0]] and "--nats-password-file" in options
        proc = NodeProcess(tmp_path / "a", options[1].split(","),
                           args=[*options[2:], "--replicas", "1", "--encoder", "none", "--dim", "16",
                                 "--batch-size", "1", "--log-level", "WARNING"]).start().wait_ready(120)
        health = httpx.get(f"{proc.url}/health", timeout=10).json()
        vector = np.ones(16, dtype=np.float32) / 4
        posted = httpx.post(f"{proc.url}/experiences", timeout=30, json={
            "text": "When the cluster speaks TLS, give the node its CA.", "domain": "ops", "vector": vector.tolist()})
        assert posted.status_code == 201, posted.text

        async def stored() -> int:
            admin = await NatsTransport.connect(ClusterSpec.load(state).nats_config(ADMIN, replicas=1))
            try:
                for _ in range(100):
                    messages = (await admin.js.stream_info("DSO")).state.messages
                    if messages:
                        return messages
                    await asyncio.sleep(0.1)
                return 0
            finally:
                await admin.close()

        assert health["status"] == "ok" and asyncio.run(stored()) == 1
    finally:
        if proc is not None:
            proc.stop(10)
        runner.invoke(cli, ["cluster", "down", "--state-dir", str(state)])


def test_with_tls_verify_a_client_needs_the_certificate_add_node_issued(tmp_path):
    spec = make_spec(tmp_path / "mtls", n=1, client_port=None, cluster_port=None, http_port=None,
                             auth=True, tls_verify=True)
    try:
        cluster.up(spec)
        user = cluster.add_node(spec, NodeIdentity.from_seed(b"mtls").node_id)
        with_cert = spec.nats_config(user.user, replicas=1)
        without = NatsConfig(servers=spec.urls, user=user.user, password=user.password, tls_ca=spec.ca_file,
                             replicas=1, connect_timeout_s=20)

        async def main():
            t = await NatsTransport.connect(with_cert)
            seq = await t.publish(b"mutual", subject_for("dso", "batch", user.user))
            await t.close()
            try:
                await NatsTransport.connect(without)
                refused = "connected"
            except TransportError as exc:
                refused = str(exc)
            return seq, refused

        seq, refused = asyncio.run(main())
    finally:
        cluster.down(spec.state_dir)
    assert with_cert.tls_cert.name == f"{user.user}.pem" and seq == 1
    assert "cannot reach" in refused and "SSLError" in refused  # the server's alert, at once
