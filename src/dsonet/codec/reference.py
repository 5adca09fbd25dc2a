"""The rows a round's received batches are judged beside, as the aggregation reads them: here, below
both the library that chooses them (`dsonet.library.view.reference`) and the rules that read them
(`dsonet.aggregate`), so the maths does not import the storage."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Reference(NamedTuple):
    vectors: np.ndarray  # (m, d) the rows' vectors
    signers: tuple[str, ...]  # (m,) each row's signer
    scales: np.ndarray | None = None  # (m, d / g) each row's code scales α as stored; None: compress to see them
