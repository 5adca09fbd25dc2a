"""A node key file others can read is refused, as ssh refuses it, unless the owner says otherwise."""

import pytest

from dsonet.identity import ALLOW_READABLE, IdentityError, NodeIdentity


@pytest.mark.parametrize("mode", [0o644, 0o666, 0o640, 0o604])
def test_a_key_file_others_can_read_is_refused_with_the_chmod_that_fixes_it(tmp_path, monkeypatch, mode):
    monkeypatch.delenv(ALLOW_READABLE, raising=False)
    path = NodeIdentity.generate().save(tmp_path / "node.key")
    path.chmod(mode)
    with pytest.raises(IdentityError) as caught:
        NodeIdentity.load(path)
    assert f"mode {mode:04o}" in str(caught.value) and f"chmod 600 {path}" in str(caught.value)
    with pytest.raises(IdentityError):
        NodeIdentity.load_or_create(path)  # not replaced by a new key either
    path.chmod(0o600)
    assert NodeIdentity.load(path).public_key


def test_the_override_uses_a_readable_key_as_it_is(tmp_path, monkeypatch):
    ident = NodeIdentity.generate()
    path = ident.save(tmp_path / "node.key")
    path.chmod(0o644)
    monkeypatch.setenv(ALLOW_READABLE, "1")
    assert NodeIdentity.load(path).node_id == ident.node_id


def test_saving_over_a_readable_key_makes_it_owner_only(tmp_path, monkeypatch):
    monkeypatch.delenv(ALLOW_READABLE, raising=False)
    path = tmp_path / "node.key"
    path.write_text("old")
    path.chmod(0o666)
    ident = NodeIdentity.generate()
    ident.save(path)
    assert NodeIdentity.load(path).node_id == ident.node_id
