"""The library's errors: what a caller can be told to fix (`LibraryError`), a write that stored
nothing (`StorageError`), a file that is not a library (`DamagedFile`),
a path that holds none (`MissingLibrary`)."""

from __future__ import annotations

from pathlib import Path

from dsonet.errors import DsoError


class LibraryError(DsoError, ValueError):
    """A library operation that cannot be done as asked."""


class StorageError(DsoError):
    """The file could not be written (disk full, database locked, read-only): nothing was stored."""


class DamagedFile(LibraryError):
    """The library file cannot be read as a library: truncated, overwritten, not SQLite, a directory."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = path, why
        super().__init__(f"{path} is damaged ({why}): restore it from a backup, or move it aside "
                         f"(mv {path} {path}.damaged) to start with an empty library")


class MissingLibrary(LibraryError):
    """A read asked of a path that holds no library: nothing is created there."""

    def __init__(self, path: Path):
        self.path = path
        super().__init__(f"--db {path}: no library there (nothing was created); `dso add TEXT --db {path}` or "
                         f"`dso import FILE --db {path}` creates one, or give the path of an existing library")
