"""What a node's rooms (`dsonet.network.ingest`, `dsonet.network.publish`) both record into, handed
over as one value: the library, the ledger kept in its file, the journal and the metrics."""

from __future__ import annotations

from dataclasses import dataclass

from dsonet.library import Library
from dsonet.network.journal import Journal
from dsonet.network.ledger import Ledger
from dsonet.network.metrics import NodeMetrics


@dataclass(frozen=True)
class Stores:
    library: Library
    ledger: Ledger  # deferred batches, outbox, seen hashes (`dsonet.network.ledger`)
    journal: Journal  # what each round admitted and refused, and reputation over time, for people
    metrics: NodeMetrics
