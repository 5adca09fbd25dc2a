"""The reference rows a lone batch is judged beside hold at most a quarter of their limit from any
one peer (issue 24, finding 3: a copier's ~100 rows were the whole pool), and name their signers."""

from dsonet.codec import make_batch
from dsonet.experience import Experience
from dsonet.identity import NodeIdentity
from dsonet.library import Library
from dsonet.library.view.reference import SIGNER_SHARE, capped_per_signer
from lib_helpers import experiences, unit

COPIER, AUTHOR, STRANGER = (NodeIdentity.from_seed(s) for s in (b"ref-copier", b"ref-author", b"ref-stranger"))


def _batch(profile, identity, n, seed):
    exps = [Experience(f"When reference case {seed}-{i} comes up, do step {i}", "math") for i in range(n)]
    return make_batch(exps, unit(n, seed), profile, identity)


def test_no_peer_fills_more_than_its_share_of_the_reference_and_only_trusted_peers_are_in_it(
        tmp_path, encoder, profile):
    trust = {COPIER.node_id: 0.9, AUTHOR.node_id: 0.9, STRANGER.node_id: 0.6}
    with Library(tmp_path / "lib.sqlite", encoder=encoder, profile=profile, trust=lambda s: trust.get(s, 1.0),
                 trusted=0.7) as lib:
        lib.ingest(_batch(profile, COPIER, 100, 1))
        lib.ingest(_batch(profile, AUTHOR, 10, 2))
        lib.ingest(_batch(profile, STRANGER, 50, 3))
        ref = lib.reference_vectors(256, min_trust=0.7)
        assert ref.signers.count(COPIER.node_id) == int(SIGNER_SHARE * 256) == 64
        assert ref.signers.count(AUTHOR.node_id) == 10 and STRANGER.node_id not in ref.signers
        assert ref.vectors.shape == (74, profile.dim)
        own = lib.add_vectors(experiences(300, seed=4), unit(300, 4))
        ref = lib.reference_vectors(256, min_trust=0.7)  # this node's own rows fill it: they are its judgement
        assert len(own) == 300 and set(ref.signers) == {"n1"} and len(ref.signers) == 256


def test_capping_keeps_the_given_order_and_the_room():
    signer_of = ["a", "a", "b", "a", "c", "a"]
    assert capped_per_signer(range(6), signer_of, room=3, limit=8) == [0, 1, 2]  # ⌈0.25 · 8⌉ = 2 a signer
    assert capped_per_signer(range(6), signer_of, room=10, limit=8) == [0, 1, 2, 4]
