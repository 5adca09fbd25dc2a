"""The median of each row of a scratch array: DeltaSoup's coordinate median and MAD, and the library's
LSH dedup split, each take one per coordinate of a transposed block."""

from __future__ import annotations

import numpy as np


def row_medians(a: np.ndarray) -> np.ndarray:
    """np.median(a, axis=1), the same numbers about 5x faster: one partition along contiguous rows, in
    place (``a`` is scratch), and the lower middle read as the largest of the lower half rather than by a
    second partition. The result never aliases ``a``, which a caller may go on to overwrite."""
    h = a.shape[1] // 2
    a.partition(h, axis=1)
    if a.shape[1] % 2:
        return a[:, h].copy()
    return (a[:, :h].max(axis=1) + a[:, h]) / a.dtype.type(2)  # as np.median: the mean of the two middles
