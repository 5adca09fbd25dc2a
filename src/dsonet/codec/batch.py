"""CompressedBatch: the signed unit a node publishes (federated-agents paper §3), protocol v4.

On the wire (msgpack), a batch is ``[content, signature]`` where ``content`` is the msgpack of::

    {"version": 4, "profile": <8-byte profile key>, "encoder": encoder id,
     "key": <32-byte Ed25519 public key>, "time": unix ms,
     "rows": [[text, domain, confidence, model, iteration, scope, episodes, agents, <code>], ...]}  # sorted by id

``scope`` is the lesson's environment in its canonical form (``numpy==2.4.6,python==3.11.9``, ''
for none; `dsonet.scope`), signed with the rest. ``episodes`` and ``agents`` are the lesson's
evidence where it was learned from agents' traffic (0, 0 otherwise; `Provenance`), signed too: a
row published again with more evidence reaches peers as the same lesson. Versions 3 (rows without
evidence) and 2 (rows without a scope either) are still read: their rows have evidence 0, 0, a
version 2 row no scope.

``hash`` = SHA-256 of the content bytes; ``signature`` = Ed25519 over the hash's hex digest.
Nothing a receiver can derive travels: the node id is sha256(key), an experience's id is the
hash of its domain and text, a row's provenance is its signer at the batch's time, and the
profile, baseline included, is named by its key (`dsonet.codec.profile`). A row's code is its
sign words then its group scales, little-endian: 964 bytes at d = g = 7680. Version 1 batches
(a JSON or msgpack object that carried a 30 KB float baseline each) are refused by name.

``decode`` checks every field strictly and verifies hash and signature; anything wrong raises
`BatchError` naming the field.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import msgpack
import numpy as np

from dsonet.codec.bitdelta import BitDeltaCodes, compress, decompress, words_per_group
from dsonet.codec.profile import DEFAULT_ROTATION_SEED, KEY_BYTES, Profile, default_profile  # noqa: F401 (re-exported)
from dsonet.errors import BatchError, CodecError, DsoError
from dsonet.experience import MAX_EVIDENCE, MAX_TEXT_CHARS, Experience, Provenance
from dsonet.identity import NodeIdentity, node_id_of, verify_signature
from dsonet.scope import Scope

VERSION = 4
_ROW_FIELDS = {  # each version read: its row's fields, in order
    2: ("text", "domain", "confidence", "model", "iteration", "code"),
    3: ("text", "domain", "confidence", "model", "iteration", "scope", "code"),
    VERSION: ("text", "domain", "confidence", "model", "iteration", "scope", "episodes", "agents", "code"),
}
READS = tuple(_ROW_FIELDS)
MAX_BATCH_BYTES = 4 * 1024 * 1024  # 4 MiB holds ~1000 experiences at d = 7680, g = d, with text
MAX_EXPERIENCES = 1000
_SCOPE_CHARS = 2048  # MAX_LESSON_PINS pins of at most 64 + 2 + 40 characters


@dataclass(frozen=True)
class CompressedBatch:
    profile: Profile
    node_id: str
    public_key: bytes
    timestamp_ms: int
    experiences: tuple[Experience, ...]  # sorted by id; row i of `codes` is experiences[i]
    codes: BitDeltaCodes
    hash: str
    signature: bytes
    content: bytes  # the signed bytes, as sent
    version: int = VERSION

    @property
    def baseline(self) -> np.ndarray:
        return self.codes.baseline

    def __len__(self) -> int:
        return len(self.experiences)

    def to_msgpack(self) -> bytes:
        """The wire encoding: the signed content and its signature."""
        return msgpack.packb([self.content, self.signature], use_bin_type=True)

    def vectors(self) -> np.ndarray:
        """Decompressed vectors ê, (M, d)."""
        return decompress(self.codes)


def make_batch(
    experiences: list[Experience],
    vectors: np.ndarray,
    profile: Profile,
    identity: NodeIdentity,
    timestamp_ms: int | None = None,
) -> CompressedBatch:
    """Compress (against the profile's baseline), hash and sign experiences (rows of ``vectors``)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if len(experiences) != len(vectors):
        raise BatchError("experiences", f"{len(experiences)} experiences but {len(vectors)} vectors")
    if vectors.ndim != 2 or vectors.shape[1] != profile.dim:
        raise BatchError("vectors", f"shape {vectors.shape} does not match the profile's dimension {profile.dim}")
    _check_rows(experiences)
    check_unit(vectors)
    try:
        codes = compress(vectors, profile.group_size, baseline=profile.baseline, rotation_seed=profile.rotation_seed)
    except CodecError as exc:
        raise BatchError("vectors", str(exc)) from None
    return sign_batch(experiences, codes, profile, identity, timestamp_ms)


def sign_batch(experiences: list[Experience], codes: BitDeltaCodes, profile: Profile, identity: NodeIdentity,
               timestamp_ms: int | None = None) -> CompressedBatch:
    """Hash and sign experiences whose codes exist already (row i of ``codes`` is experiences[i]):
    a node publishes the codes it stored, not a second compression of the floats."""
    if len(experiences) != len(codes):
        raise BatchError("experiences", f"{len(experiences)} experiences but {len(codes)} codes")
    if codes.dim != profile.dim or codes.group_size != profile.group_size or codes.rotation_seed != profile.rotation_seed:
        raise BatchError("codes", f"coded at d = {codes.dim}, g = {codes.group_size}, rotation {codes.rotation_seed}; "
                         f"the profile is {profile.to_dict()}")
    if not np.array_equal(codes.baseline, profile.baseline):
        raise BatchError("codes", "coded against another baseline than the profile's; compress against "
                         "profile.baseline (protocol v2 sends no baseline)")
    ids = _check_rows(experiences)
    over = (codes.scales > scale_bound(profile)).any(axis=1)
    if over.any():
        raise BatchError("codes", f"row {int(np.argmax(over))} has a scale no unit vector's code can have against the "
                         "profile's baseline; codes must be of L2-normalised vectors")
    order = np.argsort(ids, kind="stable")
    codes, exps = codes[order], tuple(experiences[i] for i in order)
    ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
    code_bytes = np.concatenate([codes.signs.astype("<u4", copy=False).reshape(len(codes), -1).view(np.uint8),
                                 codes.scales.astype("<f4", copy=False).view(np.uint8)], axis=1)
    rows = [[e.text, e.domain, float(e.confidence), e.provenance.model, int(e.provenance.iteration), str(e.scope),
             e.provenance.episodes, e.provenance.agents, c.tobytes()] for e, c in zip(exps, code_bytes)]
    content = msgpack.packb({"version": VERSION, "profile": bytes.fromhex(profile.key), "encoder": profile.encoder_id,
                             "key": identity.public_key, "time": ts, "rows": rows}, use_bin_type=True)
    digest = hashlib.sha256(content).hexdigest()
    exps = tuple(replace(e, provenance=replace(e.provenance, node_id=identity.node_id, timestamp_ms=ts)) for e in exps)
    return CompressedBatch(profile, identity.node_id, identity.public_key, ts, exps, codes, digest,
                           identity.sign(digest.encode()), content)


def check_unit(vectors: np.ndarray, tolerance: float = 1e-3) -> None:
    """Profile vectors are L2-normalised; say which row is not (NaN and Inf included)."""
    norms = np.linalg.norm(np.asarray(vectors, np.float32), axis=1)
    bad = ~(np.abs(norms - 1.0) <= tolerance)
    if bad.any():
        i = int(np.argmax(bad))
        raise BatchError("vectors", f"row {i} has L2 norm {float(norms[i]):.4g}; a profile's vectors are unit length "
                         "(divide each by its norm), and finite")


def _check_rows(experiences: list[Experience]) -> list[str]:
    """The experiences' ids, once they are known to fit one batch."""
    if not 0 < len(experiences) <= MAX_EXPERIENCES:
        raise BatchError("experiences", f"{len(experiences)} experiences; a batch holds 1 to {MAX_EXPERIENCES}")
    ids = [e.id for e in experiences]
    if len(set(ids)) != len(ids):
        raise BatchError("experiences", "two experiences share an id (same text and domain); deduplicate first")
    return ids


@dataclass(frozen=True)
class Claims:
    """What a payload claims, unverified: for counting what an attacker sent, never for trusting it."""

    hash: str
    texts: tuple[str, ...]


def claims(payload: bytes) -> Claims | None:
    """The content hash and row texts a payload claims, or None when it does not parse."""
    try:
        content, _ = msgpack.unpackb(payload, raw=False)
        rows = msgpack.unpackb(content, raw=False)["rows"]
        return Claims(hashlib.sha256(content).hexdigest(), tuple(str(r[0]) for r in rows))
    except Exception:  # anything may arrive: an attacker's payload need not be well-formed
        return None


# ---------------------------------------------------------------- strict decoding


def decode(data: bytes, profiles: Sequence[Profile], max_bytes: int = MAX_BATCH_BYTES) -> CompressedBatch:
    """Decode a batch, check every field, verify hash and signature.

    ``profiles``: the profiles this node holds; a batch in any other is refused, naming both.
    Raises `BatchError` (and only that) for anything wrong.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BatchError("batch", f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > max_bytes:
        raise BatchError("batch", f"{len(data)} bytes is over the limit of {max_bytes}; send smaller batches")
    if not data:
        raise BatchError("batch", "empty payload")
    try:
        return _decode(data, list(profiles))
    except BatchError:
        raise
    except (DsoError, ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError) as exc:
        raise BatchError("batch", f"malformed: {type(exc).__name__}: {exc}") from None


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=len(data), max_str_len=len(data))
    except Exception as exc:  # msgpack raises many unrelated types for corrupt input
        raise BatchError("batch", f"not valid msgpack: {type(exc).__name__}") from None


def _decode(data: bytes, profiles: list[Profile]) -> CompressedBatch:
    if data[:1] == b"{":
        raise BatchError("version", "unsupported version 1 (a JSON batch); this node reads protocol version "
                         f"{VERSION}: upgrade the sender")
    outer = _unpack(data)
    if isinstance(outer, dict) and "version" in outer:
        raise BatchError("version", f"unsupported version {outer['version']!r:.20}; this node reads protocol version "
                         f"{VERSION}: upgrade the sender")
    if not (isinstance(outer, list) and len(outer) == 2 and all(isinstance(x, bytes) for x in outer)):
        raise BatchError("batch", "expected [content, signature] as two binary fields")
    content, signature = outer
    d = _Reader(_unpack(content), "batch")
    d.keys({"version", "profile", "encoder", "key", "time", "rows"})
    version = d.int("version")
    if version not in READS:
        raise BatchError("version", f"unsupported version {version}; this node reads protocol versions {READS}")
    key = d.bytes("profile", KEY_BYTES).hex()
    profile = next((p for p in profiles if p.key == key), None)
    if profile is None:
        raise BatchError("profile", f"the batch's profile {key} (encoder {d.str('encoder', 200)!r}) is not held here; "
                         "this node holds " + ", ".join(f"{p.key} (encoder {p.encoder_id!r})" for p in profiles)
                         + ": the sender encodes into another space, or with other weights or baseline")
    if d.str("encoder", 200) != profile.encoder_id:
        raise BatchError("encoder", f"{d.str('encoder', 200)!r} is not the encoder of profile {key}")
    public_key = d.bytes("key", 32)
    if not isinstance(signature, bytes) or len(signature) != 64:
        raise BatchError("signature", "expected 64 bytes")
    digest = hashlib.sha256(content).hexdigest()
    if not verify_signature(public_key, signature, digest.encode()):
        raise BatchError("signature", "is not a valid Ed25519 signature of the content by the batch's key")
    node_id, timestamp = node_id_of(public_key), d.int("time", 0, 2**53)
    rows = d.get("rows")
    if not isinstance(rows, list) or not 0 < len(rows) <= MAX_EXPERIENCES:
        raise BatchError("rows", f"expected 1 to {MAX_EXPERIENCES} rows")
    g, n_groups = profile.group_size, profile.dim // profile.group_size
    sign_len = 4 * n_groups * words_per_group(g)
    fields = _ROW_FIELDS[version]
    exps, codes = [], []
    for i, row in enumerate(rows):  # per-record validation; the numeric checks run once over the batch below
        r = _Reader(dict(zip(fields, row)) if isinstance(row, list) and len(row) == len(fields) else row, f"rows.{i}")
        r.keys(set(fields))
        codes.append(r.bytes("code", sign_len + 4 * n_groups))
        evidence = (r.int("episodes", 0, MAX_EVIDENCE), r.int("agents", 0, MAX_EVIDENCE)) if version >= 4 else (0, 0)
        try:
            prov = Provenance(node_id, r.str("model", 200), timestamp, r.int("iteration", 0, 2**31), *evidence)
            scope = Scope.parse(r.str("scope", _SCOPE_CHARS)) if version >= 3 else Scope()
            if version >= 3 and str(scope) != r.get("scope"):
                raise BatchError(f"rows.{i}.scope", "not in canonical form (sorted, normalised names, comma-separated)")
            exps.append(Experience(r.str("text", MAX_TEXT_CHARS), r.str("domain", 64), r.number("confidence"), prov,
                                   scope))
        except BatchError:
            raise
        except ValueError as exc:
            raise BatchError(r.path, str(exc)) from None
    ids = [e.id for e in exps]
    if ids != sorted(set(ids)):
        raise BatchError("rows", "must be sorted by experience id, each id once")
    block = np.frombuffer(bytearray().join(codes), np.uint8).reshape(len(rows), -1)  # bytearray: writable arrays
    signs = np.ascontiguousarray(block[:, :sign_len]).view("<u4").reshape(len(rows), n_groups, -1)
    scales = np.ascontiguousarray(block[:, sign_len:]).view("<f4")
    finite = np.isfinite(scales).all(axis=1)
    ok = finite & (scales >= 0).all(axis=1)
    if not ok.all():
        i = int(np.argmin(ok))
        raise BatchError(f"rows.{i}.code", "scales contain NaN or Inf" if not finite[i] else "scales must be non-negative")
    bound = scale_bound(profile)
    over = (scales > bound).any(axis=1)
    if over.any():
        i = int(np.argmax(over))
        raise BatchError(f"rows.{i}.code", f"a scale of {float(scales[i].max()):.3g} is over {float(bound.max()):.3g}, "
                         "the most a unit vector's code can have against this profile's baseline")
    return CompressedBatch(profile, node_id, public_key, timestamp, tuple(exps),
                           BitDeltaCodes(signs, scales, profile.baseline, g, profile.rotation_seed),
                           digest, signature, content)


def scale_bound(profile: Profile) -> np.ndarray:
    """(G,) the largest scale a unit vector's code can have: α_j = ‖Δ_j‖₁/g ≤ ‖Δ_j‖₂/√g and
    ‖Δ_j‖₂ ≤ ‖e_j‖ + ‖ē_j‖ ≤ 1 + ‖ē_j‖ (the rotation keeps each group's norm); 0.1% slack for float32."""
    g = profile.group_size
    groups = np.linalg.norm(profile.baseline.reshape(-1, g), axis=1)
    return ((1.0 + groups) / np.sqrt(g) * 1.001).astype(np.float32)


class _Reader:
    """Typed field access on a decoded map; every failure names the field's dotted path."""

    def __init__(self, doc: Any, path: str):
        if not isinstance(doc, dict):
            raise BatchError(path, f"expected a map (or a row of {len(_ROW_FIELDS[VERSION])} fields), "
                                   f"got {type(doc).__name__}")
        self.doc, self.path = doc, path

    def _path(self, key: str) -> str:
        return key if self.path == "batch" else f"{self.path}.{key}"

    def keys(self, expected: set[str]) -> None:
        if self.doc.keys() != expected:  # a keys view compares with a set without building one
            got = set(self.doc)
            missing, extra = sorted(expected - got), sorted(map(str, got - expected))
            raise BatchError(self.path, f"missing fields {missing}, unexpected fields {extra}")

    def get(self, key: str) -> Any:
        return self.doc.get(key)

    def int(self, key: str, lo: int = -(2**63), hi: int = 2**63) -> int:
        v = self.doc[key]
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise BatchError(self._path(key), f"expected an integer in [{lo}, {hi}], got {v!r:.40}")
        return v

    def number(self, key: str) -> float:
        v = self.doc[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise BatchError(self._path(key), f"expected a finite number, got {v!r:.40}")
        return float(v)

    def str(self, key: str, max_len: int) -> str:
        v = self.doc[key]
        if not isinstance(v, str) or len(v) > max_len:
            raise BatchError(self._path(key), f"expected a string of at most {max_len} characters")
        return v

    def bytes(self, key: str, length: int) -> bytes:
        v = self.doc[key]
        if not isinstance(v, bytes):
            raise BatchError(self._path(key), f"expected binary data, got {type(v).__name__}")
        if len(v) != length:
            raise BatchError(self._path(key), f"expected {length} bytes, got {len(v)}")
        return v
