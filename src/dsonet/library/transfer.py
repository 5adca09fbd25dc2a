"""Moving experiences in and out of a library: JSONL files and signed CompressedBatch files.

JSONL: one experience per line, `Experience.to_dict()` plus "vector" (base64 of little-endian
float32: the float vector where the library holds it, else the reconstruction ê). Importing
JSONL stores rows as locally encoded (floats kept, codes made here).

Batch files: `CompressedBatch.to_msgpack()` (the wire format), at most 1,000 experiences each
(the protocol's limit); a larger export writes PATH, PATH.1, PATH.2, ... Importing one runs
`dsonet.codec.decode` (hash and signature checked) and then `Library.ingest`.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Literal

import numpy as np

from dsonet.codec import decode, make_batch
from dsonet.codec.batch import MAX_EXPERIENCES
from dsonet.experience import Experience
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
    exps, vecs = [], []
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if "vector" not in row:
            raise LibraryError(f"line {n}: no 'vector' field; export with `dso export --format jsonl`")
        exps.append(Experience.from_dict(row))
        vecs.append(np.frombuffer(base64.b64decode(row["vector"]), "<f4"))
    if not exps:
        return 0
    return len(lib.add_vectors(exps, np.stack(vecs)))
