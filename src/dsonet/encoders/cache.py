"""An on-disk cache of encoded texts, so benchmarks and training encode a corpus once.

Keyed by encoder id, kind and the SHA-256 of the texts; stored as .npy under
$DSONET_CACHE (default ~/.cache/dsonet/embeddings).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from dsonet.encoders.base import Encoder, Kind, Split


def cache_dir() -> Path:
    return Path(os.environ.get("DSONET_CACHE", Path.home() / ".cache" / "dsonet"))


def cached_encode(encoder: Encoder, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
    """``encoder.encode(texts, kind)``, from disk when this exact list was encoded before.

    An encoder that is a frozen base plus a cheap map (a Zen head, an adapter) says so with
    ``cache_parts() -> (base, map)``: only the base's vectors are cached, and the map applied.
    """
    if isinstance(encoder, Split):
        base, transform = encoder.cache_parts()
        return transform(cached_encode(base, texts, kind))
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:24]
    safe_id = "".join(c if c.isalnum() or c in "-_." else "_" for c in encoder.id)
    path = cache_dir() / "embeddings" / f"{safe_id}-{kind}-{len(texts)}-{digest}.npy"
    if path.exists():
        return np.load(path)
    vectors = encoder.encode(list(texts), kind=kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, vectors)
    os.replace(tmp, path)  # atomic: concurrent processes never read half a file
    return vectors
