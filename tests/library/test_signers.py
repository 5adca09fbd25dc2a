"""Rows are kept per (experience id, signer): a peer's copy never replaces another signer's row,
a signed tombstone removes only its signer's row, and the merged view prefers the author."""

import shutil
from pathlib import Path

import numpy as np

from dsonet.codec import make_batch
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity
from dsonet.library import Library, MergeRule
from dsonet.library.view.merge import Member
from lib_helpers import HashEncoder, unit

V1_FILE = Path(__file__).parent / "data" / "library-v1.sqlite"


def test_a_peers_copy_at_confidence_one_does_not_displace_the_authors_own_row(tmp_path, encoder, profile):
    author, attacker = NodeIdentity.from_seed(b"author"), NodeIdentity.from_seed(b"attacker")
    lesson = Experience("When a ratio is asked, simplify the fraction first.", "math", 0.6,
                        Provenance(author.node_id, "m", 1, 0))
    with Library(tmp_path / "a.sqlite", encoder=encoder, profile=profile) as lib:
        lib.add_vectors([lesson], encoder.encode([lesson.text]))
        copy = Experience(lesson.text, "math", 1.0, Provenance(attacker.node_id, "m", 2, 0))
        lib.ingest(make_batch([copy], encoder.encode([lesson.text]), profile, attacker))
        assert lib.get(lesson.id).provenance.node_id == author.node_id  # the author's own row speaks for the id
        hit = lib.search_vector(encoder.encode([lesson.text])[0], k=1, min_similarity=0.5)[0]
        assert hit.experience.provenance.node_id == author.node_id and hit.experience.confidence == 0.6
        assert set(hit.sources) == {author.node_id, attacker.node_id}

        assert lib.apply_tombstones([lesson.id], signer=attacker.node_id) == [lesson.id]  # removes its own copy only
        assert lib.get(lesson.id).provenance.node_id == author.node_id
        assert lib.apply_tombstones([lesson.id], signer=attacker.node_id) == []


def test_received_rows_take_the_signer_as_provenance_whatever_they_claim(tmp_path, encoder, profile, identity):
    claimed = Experience("When in doubt, check units.", "physics", 0.5, Provenance("someone-else", "m", 1, 0))
    with Library(tmp_path / "p.sqlite", encoder=encoder, profile=profile) as lib:
        lib.ingest(make_batch([claimed], unit(1, 4), profile, identity))
        assert lib.get(claimed.id).provenance.node_id == identity.node_id


def test_merge_rule_prefers_own_rows_then_confidence_times_trust():
    rule = MergeRule()
    own = Member(0, ("a", "me"), 0.3, 1.0, True)
    trusted = Member(1, ("a", "p1"), 0.6, 0.9, False)
    loud = Member(2, ("a", "p2"), 1.0, 0.3, False)
    assert rule.representative([loud, trusted, own]) is own
    assert rule.representative([loud, trusted]) is trusted  # 0.54 beats 0.30
    v = rule.vector([trusted, loud], np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))
    assert v[0] > v[1] and np.isclose(np.linalg.norm(v), 1.0)


def test_a_trust_function_reweights_the_merged_view(tmp_path, encoder, profile):
    peers = [NodeIdentity.from_seed(f"peer{i}".encode()) for i in range(2)]
    text = "When stuck, work backwards from the goal."
    trust = {peers[0].node_id: 0.9, peers[1].node_id: 0.1}
    with Library(tmp_path / "t.sqlite", encoder=encoder, profile=profile, trust=trust.__getitem__) as lib:
        for peer, conf in zip(peers, (0.5, 0.9)):
            lib.ingest(make_batch([Experience(text, "math", conf)], encoder.encode([text]), profile, peer))
        assert lib.get(Experience(text, "math").id).confidence == 0.9  # by confidence alone
        hit = lib.search_vector(encoder.encode([text])[0], k=1, min_similarity=0.5)[0]
        assert hit.experience.provenance.node_id == peers[0].node_id  # 0.45 weighs more than 0.09


def test_a_schema_1_file_opens_migrated_and_keeps_working(tmp_path, profile):
    path = tmp_path / "v1.sqlite"
    shutil.copy(V1_FILE, path)
    with Library(path, encoder=HashEncoder(), profile=profile) as lib:
        stats = lib.stats()
        assert stats["experiences"] == 6 and stats["with_float_vector"] == 4 and stats["tombstones"] == 1
        assert lib.rows.meta("schema") == "2"
        exp = lib.all()[0]
        assert lib.search_vector(lib.vectors([exp.id])[0], k=1, min_similarity=0.5)[0].experience.id == exp.id
        assert sum(lib.outcomes(e.id)[1] for e in lib.all()) == 1  # the counters came along
        (tombstoned,) = lib.tombstones()
        peer = NodeIdentity.from_seed(b"v1-peer")  # the peer whose row was deleted under schema 1
        again = Experience("When peer case 0, do peer step 0", "math", 0.6)
        assert again.id == tombstoned
        assert lib.ingest(make_batch([again], unit(1, 9), profile, peer)).rejected == 1  # still deleted for everyone
        lib.add("When migrating, keep the old rows.", "general")
        assert len(lib) == 7
