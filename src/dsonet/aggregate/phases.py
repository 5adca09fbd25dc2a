"""Phase 2 of DeltaSoup as a pure function (phase 1 is `verify`, phase 3 is `rules`; phase 4,
the dedup merge, is the library's merged view, `dsonet.library.view.merge`, the one merge a node runs).

    decompress_batches  every batch's codes -> one (n, d) matrix with each row's origin
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dsonet.codec.batch import CompressedBatch
from dsonet.codec.bitdelta import decompress
from dsonet.codec.threads import run_chunks


@dataclass(frozen=True)
class Rows:
    """The round's decompressed experiences and where each row came from."""

    vectors: np.ndarray  # (n, d) float32, ê
    batch: np.ndarray  # (n,) int, index into the round's batches
    row: np.ndarray  # (n,) int, row within that batch


def decompress_batches(batches: Sequence[CompressedBatch]) -> Rows:
    """Phase 2: ê = ē + α s for every experience of every batch (each batch has its own ē)."""
    sizes = np.array([len(b) for b in batches], dtype=np.int64)
    dim = batches[0].profile.dim if batches else 0
    out = np.empty((int(sizes.sum()), dim), dtype=np.float32)
    starts = np.cumsum(sizes) - sizes

    def decode(first: int, stop: int) -> None:  # one decompress per batch: each has its own baseline
        for i in range(first, stop):
            decompress(batches[i].codes, out=out[starts[i] : starts[i] + sizes[i]])

    # batches, not rows, go to the cores: a round is many small batches
    run_chunks(decode, len(batches), 1)
    batch_of_row = np.repeat(np.arange(len(batches)), sizes)
    return Rows(out, batch_of_row, np.arange(len(out)) - np.repeat(np.cumsum(sizes) - sizes, sizes))
