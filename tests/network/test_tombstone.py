import msgpack
import pytest

from dsonet.experience import experience_id
from dsonet.identity import NodeIdentity
from dsonet.network.tombstone import TombstoneError, decode_tombstone, make_tombstone

ID = experience_id("When stuck, reread the question.", "general")


def test_tombstone_round_trips_and_names_its_signer():
    ident = NodeIdentity.from_seed(b"a")
    tomb = decode_tombstone(make_tombstone([ID], ident).to_msgpack())
    assert tomb.ids == (ID,) and tomb.node_id == ident.node_id


def test_tampered_tombstone_is_refused_at_the_signature():
    doc = msgpack.unpackb(make_tombstone([ID], NodeIdentity.from_seed(b"a")).to_msgpack())
    doc["ids"] = [experience_id("other", "general")]
    with pytest.raises(TombstoneError, match="signature"):
        decode_tombstone(msgpack.packb(doc))


def test_tombstone_with_a_foreign_node_id_is_refused():
    doc = msgpack.unpackb(make_tombstone([ID], NodeIdentity.from_seed(b"a")).to_msgpack())
    doc["node_id"] = NodeIdentity.from_seed(b"b").node_id
    with pytest.raises(TombstoneError, match="node_id"):
        decode_tombstone(msgpack.packb(doc))


@pytest.mark.parametrize("payload", [b"", b"\xc1garbage", msgpack.packb([1, 2]), b"x" * 200_000])
def test_garbage_tombstone_raises_tombstone_error(payload):
    with pytest.raises(TombstoneError):
        decode_tombstone(payload)


def test_tombstone_ids_must_be_experience_ids():
    with pytest.raises(TombstoneError, match="ids"):
        make_tombstone(["../etc/passwd"], NodeIdentity.from_seed(b"a"))
