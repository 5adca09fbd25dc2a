import asyncio

import pytest

from dsonet.network import cluster
from dsonet.network.cluster_config import render_config
from dsonet.network.cluster_spec import make_spec

pytestmark = pytest.mark.nats


def test_config_routes_each_server_to_the_other_two(tmp_path):
    spec = make_spec(tmp_path, n=3, client_port=5000, cluster_port=6000, http_port=7000)
    conf = render_config(spec, spec.servers[0])
    assert "listen: 127.0.0.1:5000" in conf and "127.0.0.1:6001" in conf and "127.0.0.1:6002" in conf
    assert "127.0.0.1:6000]" not in conf and "jetstream" in conf


def test_cluster_up_down_leaves_no_server_running(tmp_path):
    spec = cluster.up(make_spec(tmp_path, client_port=None, cluster_port=None, http_port=None))
    pids = [cluster.read_pid(spec, s) for s in spec.servers]
    assert all(row["ready"] for row in cluster.status(spec))
    assert sorted(cluster.down(tmp_path)) == ["n1", "n2", "n3"]
    assert not any(cluster._alive(p) for p in pids)


def test_jetstream_replays_history_to_a_new_durable_and_dedups_publishes(nats_cluster):
    from dsonet.network.jetstream import NatsConfig, NatsTransport

    async def main():
        t = await NatsTransport.connect(NatsConfig(servers=nats_cluster.urls))
        seqs = [await t.publish(b"m%d" % i, "dso.batch.general", {"Nats-Msg-Id": f"id{i % 3}"}) for i in range(4)]
        got = []

        async def handler(chunk):
            got.extend((m.seq, m.data) for m in chunk)

        await t.subscribe("reader", handler)
        for _ in range(50):
            if len(got) >= 3:
                break
            await asyncio.sleep(0.1)
        await t.close()
        return seqs, got

    seqs, got = asyncio.run(main())
    assert seqs == [1, 2, 3, 1]
    assert got == [(1, b"m0"), (2, b"m1"), (3, b"m2")]
