"""The project's named exceptions.

Every error a user can cause says which field was wrong, what it held and how to fix it.
One type per boundary, so callers can catch exactly what a boundary may raise.
"""

from __future__ import annotations


class DsoError(Exception):
    """Base class of every error dsonet raises on purpose. ``field``: the offending field, where the
    error names one (a batch's, a tombstone's, DeltaSoup's input); None where it names none."""

    field: str | None = None
    exit_code = 1  # what `dso` exits with when this ends a command (`dsonet.asgi.PortInUse`: 3)

    @property
    def reason(self) -> str:
        """What refusals are counted by: the field, else the error's type."""
        return self.field or type(self).__name__


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
