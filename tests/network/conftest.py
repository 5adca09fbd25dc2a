"""Fixtures for the network tests: a real three-server NATS cluster on free loopback ports."""

import shutil

import pytest



def pytest_collection_modifyitems(config, items):
    """Tests marked `nats` need a real nats-server; skip them, saying how to get one, only when it is missing."""
    if shutil.which("nats-server") is not None:
        return
    skip = pytest.mark.skip(reason="nats-server is not on PATH; install it with `make system` "
                                   "(apt-get install -y nats-server)")
    for item in items:
        if "nats" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def nats_cluster(tmp_path):
    """Three clustered nats-servers with JetStream; always torn down."""
    from dsonet.network import cluster
    from dsonet.network.cluster_spec import make_spec

    spec = make_spec(tmp_path / "cluster", n=3, client_port=None, cluster_port=None, http_port=None)
    try:
        cluster.up(spec)
        yield spec
    finally:
        for server in spec.servers:
            cluster.stop_server(spec, server, timeout_s=5)
