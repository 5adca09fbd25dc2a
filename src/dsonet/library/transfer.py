"""Moving experiences in and out of a library: JSONL files and signed CompressedBatch files.

JSONL: one experience per line, `Experience.to_dict()` plus "vector" (base64 of little-endian
float32: the float vector where the library holds it, else the reconstruction ê). Importing
JSONL stores rows as locally encoded (the texts encoded here, floats kept, codes made here); a
line may be a lesson written by hand, {"text": ..., "domain": ...}, with no vector at all.

Batch files: `CompressedBatch.to_msgpack()` (the wire format), at most 1,000 experiences each
(the protocol's limit); a larger export writes PATH, PATH.1, PATH.2, ... Importing one runs
`dsonet.codec.decode` (hash and signature checked) and then `Library.ingest`.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Literal

import numpy as np

from dsonet.codec import compress, decode, decompress, make_batch
from dsonet.codec.batch import MAX_EXPERIENCES
from dsonet.codec.bitdelta import ENCODES_MIN_COSINE, code_agreement
from dsonet.errors import DsoError
from dsonet.experience import Experience, check_lesson
from dsonet.library.errors import LibraryError
from dsonet.library.library import Library

Format = Literal["jsonl", "msgpack"]
FORMATS = ("jsonl", "msgpack")


def export(lib: Library, path: str | Path, fmt: Format = "jsonl", identity=None) -> list[Path]:
    """Write every live experience to ``path``; returns the files written."""
    if fmt not in FORMATS:
        raise LibraryError(f"format: {fmt!r} is not one of {FORMATS}")
    path = Path(path)
    exps = lib.all()
    vecs = lib.vectors([e.id for e in exps])
    if fmt == "jsonl":
        with path.open("w", encoding="utf-8") as f:
            for e, v in zip(exps, vecs):
                f.write(json.dumps({**e.to_dict(), "vector": base64.b64encode(v.astype("<f4").tobytes()).decode()}) + "\n")
        return [path]
    if identity is None:
        raise LibraryError("identity: a batch file is signed; pass the node key (dso export --key PATH)")
    written = []
    for part, start in enumerate(range(0, len(exps), MAX_EXPERIENCES)):
        batch = make_batch(exps[start : start + MAX_EXPERIENCES], vecs[start : start + MAX_EXPERIENCES], lib.profile, identity)
        out = path if part == 0 else path.with_name(f"{path.name}.{part}")
        out.write_bytes(batch.to_msgpack())
        written.append(out)
    return written


def import_file(lib: Library, path: str | Path, encode_texts: bool = False) -> int:
    """Read a JSONL or batch file (format by content) into the library; returns rows added.
    ``encode_texts``: see `Library.ingest` (JSONL rows carry their floats already)."""
    data = Path(path).read_bytes()
    if data[:1] == b"{":  # JSONL (a version 1 JSON batch file is refused by `decode`, by name)
        try:
            if "hash" in json.loads(data):
                return len(lib.ingest(decode(data, profiles=[lib.profile])).added)
        except json.JSONDecodeError:  # several JSON objects, one per line
            pass
        return _import_jsonl(lib, data)
    return len(lib.ingest(decode(data, profiles=[lib.profile]), encode_texts=encode_texts).added)


def _import_jsonl(lib: Library, data: bytes) -> int:
    """Every line checked before any is stored, so a broken file imports nothing: its line number and
    what is wrong with it are the error. Each text is encoded here; a line's vector, where it gives
    one, must agree with that encoding as DeltaSoup asks of a peer (`code_agreement`), and the rows
    keep this library's encodings."""
    exps, sent = [], {}
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise LibraryError(f"byte {exc.start}: not UTF-8 text; nothing was imported") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            exp, vector = _jsonl_row(line, lib.profile.dim)
        except (DsoError, ValueError, TypeError, KeyError) as exc:
            raise LibraryError(f"line {n}: {exc}; nothing was imported") from None
        if vector is not None:
            sent[len(exps)] = (n, vector)
        exps.append(exp)
    if not exps:
        return 0
    ours = np.asarray(lib.encoder.encode([e.text for e in exps], kind="document"), np.float32)
    if sent:
        p = lib.profile
        given = np.stack([v for _, v in sent.values()])
        theirs = decompress(compress(given, p.group_size, baseline=p.baseline, rotation_seed=p.rotation_seed))
        cos = code_agreement(ours[list(sent)], theirs, p.group_size, p.baseline, p.rotation_seed)
        for (n, _), c in zip(sent.values(), cos):
            if c < ENCODES_MIN_COSINE:
                raise LibraryError(
                    f"line {n}: vector does not encode its text (cosine {c:.3f} with this library's encoding of "
                    f"it, at least {ENCODES_MIN_COSINE} expected): the text was changed after export, or another "
                    "encoder wrote it; drop the line's \"vector\" to have the text encoded here. Nothing was imported")
    return len(lib.add_vectors(exps, ours))


def _jsonl_row(line: str, dim: int) -> tuple[Experience, np.ndarray | None]:
    """One line: an exported row (`Experience.to_dict()` and "vector"), or a lesson written by hand
    ({"text", "domain"?}), whose vector the import makes."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LibraryError(f"not JSON ({exc.msg}, column {exc.colno}: a line cut short?)") from None
    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
        raise LibraryError('no "text": each line is an object with a "text" (and optionally "domain")')
    check_lesson(row["text"])
    exp = Experience.from_dict(row)
    if row.get("vector") is None:
        return exp, None
    try:
        raw = base64.b64decode(row["vector"], validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise LibraryError("vector: not base64 (export with `dso export`, or drop the field to have the text "
                           "encoded)") from None
    if len(raw) != 4 * dim:
        raise LibraryError(f"vector: {len(raw)} bytes, this library's profile has {dim} float32s ({4 * dim} bytes)")
    vector = np.frombuffer(raw, "<f4")
    if not np.isfinite(vector).all():
        raise LibraryError("vector: holds NaN or Inf")
    return exp, vector
