"""An authenticated cluster (`dso cluster up` without --open): real nats-servers refuse what a node
user may not do, let two nodes exchange experiences and tombstones, and refuse unknown clients."""

import asyncio
import stat

import numpy as np
import pytest

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.network import cluster
from dsonet.network.cluster_config import write_configs
from dsonet.network.cluster_spec import ClusterSpec, make_spec
from dsonet.network.auth import ADMIN, durable_for, node_permissions
from dsonet.network.jetstream import NatsConfig, NatsTransport
from dsonet.network.node import Node, NodeConfig
from dsonet.network.transport import TransportError, subject_for

pytestmark = pytest.mark.nats
DIM = 16
FAST = {"publish_timeout_s": 1.0, "check_interval_s": 0.5}  # a refused request times out: keep that short


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


async def _until(check, timeout_s: float = 20.0) -> bool:
    for _ in range(int(timeout_s / 0.1)):
        if await check():
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    spec = make_spec(tmp_path_factory.mktemp("secured"), n=3, client_port=None, cluster_port=None,
                             http_port=None, auth=True)
    try:
        yield cluster.up(spec)
    finally:
        for server in spec.servers:
            cluster.stop_server(spec, server, timeout_s=5)


def test_secrets_and_configs_are_readable_by_their_owner_only(tmp_path, monkeypatch):
    spec = make_spec(tmp_path, n=3, client_port=5000, cluster_port=6000, http_port=7000, auth=True)
    cluster.prepare(spec)
    monkeypatch.chdir(tmp_path.parent)  # `add-node --state-dir rel` rewrites configs with the same absolute paths
    assert ClusterSpec.load(tmp_path.name) == spec
    spec.creds.user(durable_for("ab" * 32), create=True)
    write_configs(spec)
    conf = spec.conf_path(spec.servers[0]).read_text()
    assert "jetstream: enabled" in conf and 'user: "admin"' in conf and f'user: "node-{"ab" * 8}"' in conf
    assert "authorization { user: \"route\"" in conf and "nats-route://route:" in conf
    files = [spec.conf_path(s) for s in spec.servers] + list(spec.creds.dir.iterdir())
    assert len(files) == 6 and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert stat.S_IMODE(spec.creds.dir.stat().st_mode) == 0o700


def test_a_node_user_may_use_only_its_own_consumer_and_no_stream_administration():
    allowed = node_permissions("node-1", "DSO", "dso")["publish"]
    assert "$JS.API.CONSUMER.MSG.NEXT.DSO.node-1" in allowed and "$JS.ACK.DSO.node-1.>" in allowed
    assert not [s for s in allowed if "DELETE" in s or "PURGE" in s or "STREAM.CREATE" in s or "node-2" in s]


def test_the_nats_user_is_named_after_the_nodes_durable_consumer(tmp_path):
    identity = NodeIdentity.from_seed(b"durable")
    node = Node(NodeConfig(tmp_path, encoder=None, dim=DIM), identity, transport=None, profile=None)
    assert node.durable == durable_for(identity.node_id)


def test_a_node_user_cannot_delete_or_purge_the_stream_nor_touch_another_nodes_consumer(secured):
    a, b = (cluster.add_node(secured, NodeIdentity.from_seed(s).node_id) for s in (b"perm-a", b"perm-b"))

    async def main():
        ta = await NatsTransport.connect(secured.nats_config(a.user, **FAST), name="a")
        tb = await NatsTransport.connect(secured.nats_config(b.user, **FAST), name="b")
        admin = await NatsTransport.connect(secured.nats_config(ADMIN), name="admin")
        noop = lambda chunk: asyncio.sleep(0)  # noqa: E731
        await ta.subscribe(a.user, noop)
        await tb.subscribe(b.user, noop)
        seq = await ta.publish(b"kept", subject_for("dso", "batch", a.user))
        attempts = {
            "delete stream": ta.js.delete_stream("DSO"),
            "purge stream": ta.js.purge_stream("DSO"),
            "delete b's consumer": ta.js.delete_consumer("DSO", b.user),
            "delete own consumer": ta.js.delete_consumer("DSO", a.user),
            "read b's consumer": ta.js.consumer_info("DSO", b.user),
            "pull from b's consumer": ta.nc.request(f"$JS.API.CONSUMER.MSG.NEXT.DSO.{b.user}", b"1", timeout=1),
            "make another stream": ta.js.add_stream(name="MINE", subjects=["mine.>"]),
        }
        outcomes = await asyncio.gather(*attempts.values(), return_exceptions=True)
        await asyncio.sleep(0.2)
        refused = set(ta.refused)
        state = await admin.js.stream_info("DSO")
        consumers = {c.name for c in await admin.js.consumers_info("DSO")}
        for t in (ta, tb, admin):
            await t.close()
        return seq, dict(zip(attempts, outcomes)), refused, state.state.messages, consumers

    seq, outcomes, refused, messages, consumers = asyncio.run(main())
    assert seq >= 1
    assert all(isinstance(o, Exception) for o in outcomes.values()), outcomes  # the server answers none of them
    assert {"$js.api.stream.delete.dso", "$js.api.stream.purge.dso", f"$js.api.consumer.delete.dso.{b.user}",
            f"$js.api.consumer.delete.dso.{a.user}", f"$js.api.consumer.info.dso.{b.user}",
            f"$js.api.consumer.msg.next.dso.{b.user}", "$js.api.stream.create.mine"} <= refused
    assert messages >= 1 and {a.user, b.user} <= consumers


def test_two_nodes_exchange_an_experience_and_its_tombstone_on_an_authenticated_cluster(secured, tmp_path):
    ids = [NodeIdentity.from_seed(s) for s in (b"node-x", b"node-y")]
    users = [cluster.add_node(secured, i.node_id) for i in ids]

    async def main():
        nodes = []
        for name, identity, user in zip("xy", ids, users):
            transport = await NatsTransport.connect(secured.nats_config(user.user, **FAST), name=name)
            node = await Node.open(NodeConfig(tmp_path / name, encoder=None, dim=DIM, rule="mean"), transport,
                                   identity=identity)
            await node.start()
            nodes.append(node)
        x, y = nodes
        exp = await x.submit("When two nodes share a lesson, both can search it.", "math", 0.8, vector=_unit(1))
        await x.flush()
        arrived = await _until(lambda: y.get(exp.id))
        await x.delete(exp.id)
        gone = await _until(lambda: _none(y.get(exp.id)))
        problems = [n.transport.problem for n in nodes]
        for n in nodes:
            await n.close()
        return arrived, gone, problems

    arrived, gone, problems = asyncio.run(main())
    assert arrived and gone and problems == ["", ""]


async def _none(coro) -> bool:
    return (await coro) is None


def test_a_client_without_credentials_with_a_wrong_password_or_revoked_is_refused(secured):
    node_id = NodeIdentity.from_seed(b"revoked").node_id
    user = cluster.add_node(secured, node_id)
    password = user.password
    configs = {
        "no user": NatsConfig(servers=secured.urls, connect_timeout_s=20),  # refused at once; 20 s on a busy CI
        "wrong password": NatsConfig(servers=secured.urls, user=user.user, password="guess", connect_timeout_s=20),
    }

    async def refusal(config):
        try:
            await NatsTransport.connect(config)
        except TransportError as exc:
            return str(exc)
        return "connected"

    async def main():
        out = {label: await refusal(c) for label, c in configs.items()}
        ok = await NatsTransport.connect(secured.nats_config(user.user))
        assert await asyncio.to_thread(cluster.remove_node, secured, node_id)
        out["closed on revoke"] = await _until(lambda: _true(not ok.nc.is_connected))
        await ok.close()
        out["revoked"] = await refusal(NatsConfig(servers=secured.urls, user=user.user, password=password,
                                                  connect_timeout_s=20))
        return out

    out = asyncio.run(main())
    assert out["closed on revoke"] and "refused a client without a user" in out["no user"]
    assert f"refused user '{user.user}'" in out["wrong password"] and f"refused user '{user.user}'" in out["revoked"]


def test_a_node_that_may_not_make_the_missing_stream_says_so_and_resumes_once_the_admin_does(secured, tmp_path):
    identity = NodeIdentity.from_seed(b"lonely")
    user = cluster.add_node(secured, identity.node_id)
    peer = NodeIdentity.from_seed(b"lonely-peer")

    async def main():
        transport = await NatsTransport.connect(secured.nats_config(user.user, **FAST), name="lonely")
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM, rule="mean"), transport, identity=identity)
        await node.start()
        admin = await NatsTransport.connect(secured.nats_config(ADMIN), name="admin")
        batches = [make_batch([Experience(f"When the stream is back {i}, read on.", "math")], _unit(i)[None, :],
                              node.profile, peer) for i in range(2)]

        await admin.js.delete_consumer("DSO", node.durable)  # the operator may; the node makes it again
        remade = await _until(lambda: _true(transport.repairs >= 1))
        await admin.publish(batches[0].to_msgpack(), subject_for("dso", "batch", "math"))
        first = await _until(lambda: node.get(batches[0].experiences[0].id))

        await admin.js.delete_stream("DSO")
        missing = await _until(lambda: _true("may not create it" in transport.problem))
        try:
            await node.transport.publish(b"x", subject_for("dso", "batch", node.durable))
            refused_publish = ""
        except TransportError as exc:
            refused_publish = str(exc)
        late = await NatsTransport.connect(secured.nats_config(user.user, **FAST), name="late")  # starts all the same
        await late.subscribe(node.durable, lambda chunk: asyncio.sleep(0))
        at_start = late.problem
        await late.close()
        await admin.close()
        admin = await NatsTransport.connect(secured.nats_config(ADMIN), name="admin")  # makes the stream again
        await admin.publish(batches[1].to_msgpack(), subject_for("dso", "batch", "math"))
        second = await _until(lambda: node.get(batches[1].experiences[0].id))
        problem = transport.problem
        await admin.close()
        await node.close()
        return remade, first, missing, refused_publish, at_start, second, problem

    remade, first, missing, refused_publish, at_start, second, problem = asyncio.run(main())
    assert remade and first and missing and second
    assert "may not create it" in refused_publish and "is missing" in at_start
    assert problem.split(": ", 1)[1].startswith(f"reading with {durable_for(identity.node_id)} again")


async def _true(value: bool) -> bool:
    return value


@pytest.mark.nats
def test_a_member_flooding_the_stream_leaves_the_others_publishing_and_read(tmp_path):
    """Each node publishes to its own subject only; the stream keeps a member's last messages and
    3/4 of the servers' store, oldest first. Before (issue 24): one node user publishing 4 MiB
    messages filled the store until JetStream answered "insufficient resources" to every node."""
    spec = make_spec(tmp_path / "flood", n=1, client_port=None, cluster_port=None, http_port=None,
                             auth=True, store_bytes=48 * 2**20, member_max_msgs=8)
    cluster.up(spec)
    a, b = (cluster.add_node(spec, NodeIdentity.from_seed(s).node_id) for s in (b"flood-a", b"flood-b"))
    on_a, on_b = subject_for("dso", "batch", a.user), subject_for("dso", "batch", b.user)

    async def main():
        ta = await NatsTransport.connect(spec.nats_config(a.user, **FAST), name="a")
        tb = await NatsTransport.connect(spec.nats_config(b.user, **FAST), name="b")
        try:
            flood = [await ta.publish(bytes(4 * 2**20), on_a) for _ in range(24)]  # 96 MiB, twice the store
            honest = [await tb.publish(f"honest {i}".encode(), on_b) for i in range(3)]
            try:
                await ta.publish(b"as b", on_b)  # another member's subject: refused
                foreign = "published"
            except TransportError:
                foreign = "refused"
            info = await ta.js.stream_info("DSO")
            read: list[str] = []

            async def handler(chunk):
                read.extend(m.subject for m in chunk)

            await tb.subscribe(b.user, handler)  # a node's reader takes every member's subject
            await _until(lambda: asyncio.sleep(0, len(read) >= info.state.messages))
        finally:
            await ta.close()
            await tb.close()
        return flood, honest, foreign, info, read

    try:
        flood, honest, foreign, info, read = asyncio.run(main())
    finally:
        for server in spec.servers:
            cluster.stop_server(spec, server, timeout_s=5)
    assert len(flood) == 24 and len(honest) == 3 and foreign == "refused"
    assert info.config.max_msgs_per_subject == 8 and info.state.bytes <= spec.stream_max_bytes
    assert info.state.messages == 8 + 3  # the flooder's last 8 and every honest message
    assert read.count(on_b) == 3 and read.count(on_a) == 8
