"""`dso node keys` and `dso node quarantine` against a running node process (its API behind a
token), checked through the API afterwards."""

import sqlite3

import numpy as np
import pytest
from click.testing import CliRunner

from dsonet.cli.main import cli
from dsonet.identity import NodeIdentity
from dsonet.network.procs import NodeProcess

pytestmark = pytest.mark.slow
TOKEN = "op-token"


def _vec(seed: int) -> list[float]:
    v = np.random.default_rng(seed).standard_normal(16)
    return (v / np.linalg.norm(v)).tolist()


def test_an_operator_lists_and_drops_quarantined_rows_and_bans_and_resets_a_key(tmp_path):
    node = NodeProcess(tmp_path, [], args=["--encoder", "none", "--dim", "16", "--log-level", "WARNING"], token=TOKEN)
    node.start().wait_ready()
    with node.client() as client:
        ids = [client.post("/experiences", json={"text": f"When case {i} comes, do step {i}.", "vector": _vec(i)})
               .json()["id"] for i in range(3)]
    node.stop()
    db = sqlite3.connect(tmp_path / "library.sqlite")
    db.execute("UPDATE experiences SET signs = signs || X'00' WHERE id = ?", (ids[1],))  # damage: a byte too many
    db.commit()
    db.close()
    key = NodeIdentity.from_seed(b"operator-cli").node_id

    def run(*args: str):
        return CliRunner().invoke(cli, ["node", *args, "--node", node.url, "--node-token", TOKEN])

    node.start().wait_ready()
    try:
        with node.client() as client:
            health = client.get("/health").json()
        listed = run("quarantine")
        seq = int(listed.output.split()[0])
        dropped = run("quarantine", "--drop", str(seq))
        banned = run("keys", "--ban", key)
        keys_banned = run("keys")
        reset = run("keys", "--reset", key)
        refused = CliRunner().invoke(cli, ["node", "keys", "--node", node.url])  # no token
        with node.client() as client:
            left = client.get("/quarantine").json()
            standing = {k["node_id"]: k for k in client.get("/keys").json()["keys"]}
    finally:
        node.stop()
    assert listed.exit_code == 0 and ids[1][:16] in listed.output and "1 quarantined" in listed.output
    assert dropped.exit_code == 0 and "dropped 1" in dropped.output
    assert health["quarantined_rows"] == 1 and left["count"] == 0  # /health counted it until it was dropped
    assert banned.exit_code == 0 and "banned" in banned.output
    assert f"{key[:16]}" in keys_banned.output and "BANNED" in keys_banned.output
    assert reset.exit_code == 0 and key not in standing  # reset: no ban, no counts
    assert refused.exit_code != 0 and "401" in refused.output and "--node-token" in refused.output
