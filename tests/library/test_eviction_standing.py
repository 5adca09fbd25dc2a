"""Past capacity, rows of signers not yet trusted go first, then other peers' rows, and the
library's own rows last, whatever confidence each claims; within a standing, lowest quality first."""

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from lib_helpers import experiences, unit

TRUSTED, NEW = NodeIdentity.from_seed(b"evict-trusted"), NodeIdentity.from_seed(b"evict-new")
LATE = NodeIdentity.from_seed(b"evict-late")


def _batch(profile, identity, n, seed, confidence):
    exps = [Experience(f"When case {seed}-{i} comes up, do step {i}", "math", confidence) for i in range(n)]
    return make_batch(exps, unit(n, seed), profile, identity)


def _held(lib):
    return sorted(lib.db.execute("SELECT signer, confidence FROM experiences").fetchall())


def test_a_confident_flood_from_new_keys_evicts_itself_not_trusted_or_own_rows(tmp_path, encoder, profile):
    trust = {TRUSTED.node_id: 0.9, NEW.node_id: 0.5, LATE.node_id: 0.9}
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile, capacity=5,
                 trust=lambda s: trust.get(s, 1.0), trusted=0.7) as lib:
        own = lib.add_vectors(experiences(2, seed=1), unit(2, 1))  # confidence 0.3–0.9, drawn
        lib.ingest(_batch(profile, TRUSTED, 3, 2, 0.7))
        flood = lib.ingest(_batch(profile, NEW, 3, 3, 1.0))
        assert len(flood.evicted) == 3  # the flood's own rows, at confidence 1.0
        assert {s for s, _ in _held(lib)} == {"n1", TRUSTED.node_id}
        later = lib.ingest(_batch(profile, LATE, 2, 4, 0.9))  # trusted rows past capacity: peers' go, not ours
        assert len(later.evicted) == 2
        assert sum(s == "n1" for s, _ in _held(lib)) == 2 and all(lib.get(i) for i in own)
        assert sorted(c for s, c in _held(lib) if s != "n1") == [0.7, 0.9, 0.9]  # the lowest-quality peers' rows went


def test_without_trust_the_own_rows_still_go_last(tmp_path, encoder, profile):
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile, capacity=3) as lib:
        own = lib.add_vectors([Experience(f"When own case {i}, do own step", "math", 0.1) for i in range(2)],
                              unit(2, 5))
        assert lib.ingest(_batch(profile, TRUSTED, 3, 6, 0.9)).evicted and all(lib.get(i) for i in own)
        assert len(lib.rows.db.execute("SELECT 1 FROM experiences WHERE received = 1").fetchall()) == 1
