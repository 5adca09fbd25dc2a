import stat

import pytest

from dsonet.identity import IdentityError, NodeIdentity, node_id_of, verify_signature


def test_key_is_saved_owner_only_and_loads_back_to_the_same_node(tmp_path):
    ident = NodeIdentity.generate()
    path = ident.save(tmp_path / "keys" / "node.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = NodeIdentity.load(path)
    assert again.node_id == ident.node_id == node_id_of(ident.public_key)
    assert len(ident.node_id) == 64


def test_signatures_verify_only_for_the_signed_message_and_key():
    a, b = NodeIdentity.generate(), NodeIdentity.generate()
    sig = a.sign(b"hash")
    assert verify_signature(a.public_key, sig, b"hash")
    assert not verify_signature(a.public_key, sig, b"hash2")
    assert not verify_signature(b.public_key, sig, b"hash")
    assert not verify_signature(b"short", sig, b"hash")


def test_loading_a_missing_or_bad_key_says_how_to_fix_it(tmp_path):
    with pytest.raises(IdentityError, match="dso keygen"):
        NodeIdentity.load(tmp_path / "nope.key")
    (tmp_path / "bad.key").write_text("not a key")
    (tmp_path / "bad.key").chmod(0o600)
    with pytest.raises(IdentityError, match="not a PEM"):
        NodeIdentity.load(tmp_path / "bad.key")


def test_seeded_identities_are_deterministic():
    assert NodeIdentity.from_seed(b"x").node_id == NodeIdentity.from_seed(b"x").node_id
