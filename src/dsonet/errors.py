"""The project's named exceptions.

Every error a user can cause says which field was wrong, what it held and how to fix it.
One type per boundary, so callers can catch exactly what a boundary may raise.
"""

from __future__ import annotations


class DsoError(Exception):
    """Base class of every error dsonet raises on purpose."""


class CodecError(DsoError, ValueError):
    """Bad arguments to BitDelta (shape, dtype, group size, non-finite values)."""


class BatchError(DsoError, ValueError):
    """A CompressedBatch that cannot be decoded or does not verify.

    ``field`` names the offending field (dotted path), so the sender can fix it.
    """

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")
