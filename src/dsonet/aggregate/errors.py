"""The aggregate layer's named error."""

from __future__ import annotations

from dsonet.errors import DsoError


class AggregationError(DsoError, ValueError):
    """Input DeltaSoup refuses (replay, rate limit, reputation, stale or oversized batch) or
    a rule whose preconditions fail. ``field`` names what was wrong, ``problem`` says how to fix it.
    """

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class RateLimited(AggregationError):
    """A verified batch whose sender is over its rate: nothing is wrong with it but its timing, so
    a receiver may hold it and submit it again later (`Node` does, for senders it knows)."""

    def __init__(self, node_id: str, problem: str, field: str = "rate"):
        """``field``: "rate" (batches over the window), "rows" (a newcomer's row budget)."""
        super().__init__(field, problem)
        self.node_id = node_id
