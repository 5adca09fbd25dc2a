"""Tombstone: the small signed message that replicates a DELETE through the stream.

    {"kind": "tombstone", "version": 1, "node_id", "public_key", "timestamp", "ids": [exp id, ...],
     "signature": Ed25519 over sha256(canonical msgpack of the other fields)}

Policy (what a receiver honours): a library keeps one row per (experience, signer), and a
tombstone removes only its signer's own rows. Anyone may sign a tombstone, so honouring every
signer would let one Byzantine node empty every library; a signer's retraction of what it
signed needs no vote. A node's local DELETE removes every row of the id locally.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass

import msgpack

from dsonet.errors import DsoError
from dsonet.identity import NodeIdentity, node_id_of, verify_signature

VERSION = 1
MAX_IDS = 1000
MAX_BYTES = 128 * 1024
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class TombstoneError(DsoError, ValueError):
    """A tombstone that cannot be decoded or does not verify; ``field`` names what was wrong."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"tombstone.{field}: {problem}")


@dataclass(frozen=True)
class Tombstone:
    node_id: str
    public_key: bytes
    timestamp_ms: int
    ids: tuple[str, ...]
    signature: bytes

    def _content(self) -> dict:
        return {"kind": "tombstone", "version": VERSION, "node_id": self.node_id, "public_key": self.public_key,
                "timestamp": self.timestamp_ms, "ids": list(self.ids)}

    def to_msgpack(self) -> bytes:
        return msgpack.packb({**self._content(), "signature": self.signature}, use_bin_type=True)


def _digest(content: dict) -> bytes:
    return hashlib.sha256(msgpack.packb(dict(sorted(content.items())), use_bin_type=True)).digest()


def make_tombstone(ids: list[str], identity: NodeIdentity, timestamp_ms: int | None = None) -> Tombstone:
    ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
    unsigned = Tombstone(identity.node_id, identity.public_key, ts, tuple(sorted(set(ids))), b"")
    _check_ids(list(unsigned.ids))
    return Tombstone(unsigned.node_id, unsigned.public_key, ts, unsigned.ids,
                     identity.sign(_digest(unsigned._content())))


def decode_tombstone(data: bytes) -> Tombstone:
    """Decode and verify; raises `TombstoneError` naming the field for anything wrong."""
    if len(data) > MAX_BYTES:
        raise TombstoneError("size", f"{len(data)} bytes, the limit is {MAX_BYTES}; delete fewer ids at once")
    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises many unrelated types for corrupt input
        raise TombstoneError("payload", f"not valid msgpack ({type(exc).__name__})") from None
    expected = {"kind", "version", "node_id", "public_key", "timestamp", "ids", "signature"}
    if not isinstance(doc, dict) or set(doc) != expected:
        raise TombstoneError("payload", f"expected exactly the fields {sorted(expected)}")
    if doc["kind"] != "tombstone" or doc["version"] != VERSION:
        raise TombstoneError("version", f"kind {doc['kind']!r} version {doc['version']!r}; expected tombstone v{VERSION}")
    pk, sig, ts, ids = doc["public_key"], doc["signature"], doc["timestamp"], doc["ids"]
    if not isinstance(pk, bytes) or len(pk) != 32:
        raise TombstoneError("public_key", "expected 32 bytes (a raw Ed25519 key)")
    if doc["node_id"] != node_id_of(pk):
        raise TombstoneError("node_id", "is not sha256 of the public key")
    if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts < 2**53:
        raise TombstoneError("timestamp", f"expected unix milliseconds, got {ts!r:.40}")
    if not isinstance(ids, list):
        raise TombstoneError("ids", "expected a list of experience ids")
    _check_ids(ids)
    if not isinstance(sig, bytes) or not verify_signature(pk, sig, _digest({k: doc[k] for k in expected - {"signature"}})):
        raise TombstoneError("signature", "is not a valid Ed25519 signature by the tombstone's public key")
    return Tombstone(doc["node_id"], pk, ts, tuple(ids), sig)


def _check_ids(ids: list) -> None:
    if not 0 < len(ids) <= MAX_IDS:
        raise TombstoneError("ids", f"{len(ids)} ids; a tombstone names 1 to {MAX_IDS}")
    bad = next((i for i in ids if not isinstance(i, str) or not _HEX64.match(i)), None)
    if bad is not None:
        raise TombstoneError("ids", f"{bad!r:.80} is not an experience id (64 lower-case hex digits)")
