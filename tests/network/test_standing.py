"""Each key's reputation and outcome counts live in the library file (`Standings`): trust earned by
outcomes, and a harmful record, outlast a restart; a file from before opens as it did."""

import asyncio
import shutil
from pathlib import Path

import numpy as np

from dsonet.aggregate import DeltaSoupConfig, Reputation
from dsonet.codec import default_profile, make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from dsonet.network.node import Node, NodeConfig
from dsonet.network.standing import Bans, Standings
from dsonet.network.transport import InProcessHub, subject_for

DIM = 16
BEFORE = Path(__file__).parent / "data" / "library-before-ledger.sqlite"  # written as of commit 070b1ed


def _reputation() -> Reputation:
    c = DeltaSoupConfig()
    return Reputation(c.rep_decay, c.rep_floor, c.rep_initial, c.volume_ceiling, c.trusted)


def test_standings_come_back_from_the_file_and_a_reset_key_leaves_it(tmp_path):
    with Library(tmp_path / "lib.sqlite", encoder=None, profile=default_profile(DIM, "none")) as lib:
        rep = _reputation()
        standings = Standings(lib.db, rep)
        for _ in range(6):
            rep.admitted("earner")
        for _ in range(3):
            rep.outcome("earner", helped=True)
        for _ in range(5):
            rep.outcome("poisoner", helped=False)
        assert standings.save() == 2 and standings.save() == 0  # only what moved is written
        again = _reputation()
        Standings(lib.db, again)
        assert again.state() == rep.state() and again.trusted("earner") and again.skipped("poisoner")
        assert again.outcomes("poisoner") == (0, 5) and again.condemned("poisoner")
        rep.forget("poisoner")
        assert standings.save() == 1
        after_reset = _reputation()
        Standings(lib.db, after_reset)
        assert after_reset.get("poisoner") == 0.5 and after_reset.trusted("earner")
        lib.db.execute("UPDATE standing SET reputation = 7.0 WHERE node_id = 'earner'")  # a damaged value
        damaged = _reputation()
        Standings(lib.db, damaged)
        assert damaged.get("earner") == 0.5  # that key starts again, nothing crashes


def test_a_file_from_before_standings_opens_with_every_key_initial_and_its_bans_kept(tmp_path):
    shutil.copy(BEFORE, tmp_path / "library.sqlite")
    with Library(tmp_path / "library.sqlite", encoder=None, profile=default_profile(DIM, "none")) as lib:
        rep = _reputation()
        Standings(lib.db, rep)
        assert rep.state() == {} and Bans(lib.rows).keys == frozenset()
        assert len(lib) == 2


def test_a_node_keeps_a_peers_outcome_earned_trust_across_a_restart(tmp_path):
    """Before: reputation lived in memory only, so a restart put every key back at 0.5 (a poisoner
    hidden by harmful outcomes came back; a peer trusted by outcomes had every row checked again)."""
    peer = NodeIdentity.from_seed(b"restart-peer")
    center = np.eye(1, DIM, dtype=np.float32)[0]

    async def main():
        hub = InProcessHub()
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM), hub.transport())
        await node.start()
        sender = hub.transport()
        for b in range(3):
            exps = [Experience(f"When restart lesson {b}.{i} applies, use it.", "math") for i in range(10)]
            x = center + 0.15 * np.random.default_rng(b).standard_normal((10, DIM)).astype(np.float32)
            await sender.publish(make_batch(exps, x / np.linalg.norm(x, axis=1, keepdims=True), node.profile,
                                            peer).to_msgpack(), subject_for("dso", "batch", "math"))
        await hub.drained([node.durable])
        hits = await node.search(vector=center, min_similarity=0.0)
        await node.record_outcome(hits, True)
        before = node.soup.reputation.get(peer.node_id)
        await node.close()
        node = await Node.open(NodeConfig(tmp_path, encoder=None, dim=DIM), hub.transport())
        after = node.soup.reputation.get(peer.node_id), node.soup.reputation.outcomes(peer.node_id)
        await node.close()
        return before, after

    before, (after, outcomes) = asyncio.run(main())
    assert before >= DeltaSoupConfig().trusted and after == before and outcomes == (5, 0)
