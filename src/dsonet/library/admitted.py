"""What a receiver stores of one batch, one value (`Library.ingest`): the batch, the rows its round
admitted, their ê as the round decoded them, which rows it re-encoded and found true, and our
encodings of the admitted texts. A node builds it where its round ends (`dsonet.network.ingest`); a
batch stored whole (an import, a bench) is `Admitted(batch)`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsonet.codec import CompressedBatch


@dataclass(frozen=True)
class Admitted:
    batch: CompressedBatch
    keep: np.ndarray | None = None  # (n,) bool over the batch's rows; None: every row
    # (admitted, d): their ê as the round decoded them, which the merge clusters by; None: decoded from the codes
    decoded: np.ndarray | None = None
    # (n,) bool: rows whose text the round re-encoded and found to match its code; None: none was checked
    verified: np.ndarray | None = None
    # (admitted, d): our encodings of the admitted texts, kept as the rows' floats (`--encode-texts`);
    # None: none given (`Library.ingest` encodes them itself when asked to)
    encodings: np.ndarray | None = None

    @property
    def sampled(self) -> list[str]:
        """Ids of the admitted rows stored on a re-encoding sample's word only (none with the check off:
        no row was checked then, and no key can be caught)."""
        if self.verified is None:
            return []
        keep = np.ones(len(self.batch), bool) if self.keep is None else np.asarray(self.keep, bool)
        return [self.batch.experiences[j].id for j in np.flatnonzero(keep & ~self.verified)]
