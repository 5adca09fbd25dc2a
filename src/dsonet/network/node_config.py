"""What a node is told when it starts (`NodeConfig`: checked once, here), and the error for a request
it refuses (`NodeError`); the node that runs with them is `dsonet.network.node`, which offers both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsonet.errors import DsoError
from dsonet.library.view.merge import THETA_DUP


class NodeError(DsoError, ValueError):
    """A request the node refuses (wrong vector dimension, non-finite values, unknown id...)."""


@dataclass
class NodeConfig:
    data_dir: Path
    encoder: str | None = "default"  # an encoder spec (default = MiniLM + Zen head, 7680 dims), or None: vectors must be given
    dim: int | None = None  # the profile's dimension when there is no encoder
    encoder_id: str = "none"  # names the space when there is no encoder (peers must agree on it)
    batch_interval_s: float = 60.0  # the paper: broadcast every 60 s ...
    batch_size: int = 10  # ... or after 10 new experiences
    max_batch_experiences: int = 100  # a long outage is published in batches of at most this many
    subject_prefix: str = "dso"
    # rows kept (those of signers not yet trusted evicted first, own rows last): a flood cannot fill the disk
    capacity: int | None = 200_000
    soup: dict[str, Any] = field(default_factory=dict)  # DeltaSoupConfig overrides
    # The paper's coordinate-wise MAD rule ("deltasoup") drops 90-100 % of honest rows on real
    # BitDelta codes (MiniLM, g = d: each ê is ē + α·s, so per-coordinate MADs are tiny); "median"
    # (distance to the coordinate median, robust z-score) keeps ~95 % and still drops random rows.
    rule: str = "median"
    theta_dup: float = THETA_DUP  # the merged view's duplicate threshold (`dsonet.library.view.merge`)
    model: str = ""  # recorded in provenance
    # Encode peers' texts too and keep the floats on disk: exact ranking of their experiences
    # (recall@10 1.0 instead of ~0.93 from codes alone) for the encoder's time and 30 KB a row.
    encode_texts: bool = False

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if self.encoder is None and self.dim is None:
            raise NodeError("dim: a node without an encoder needs the profile's dimension (--dim)")
        if self.encode_texts and self.encoder is None:
            raise NodeError("encode_texts: a node without an encoder cannot encode peers' texts; give --encoder")
        if self.batch_interval_s <= 0 or self.batch_size < 1:
            raise NodeError(f"batch_interval_s ({self.batch_interval_s}) must be > 0 and batch_size "
                            f"({self.batch_size}) >= 1")
