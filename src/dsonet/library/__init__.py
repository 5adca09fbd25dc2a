"""The node's local experience library: storage, retrieval over compressed codes, merge, injection."""

from dsonet.library.dedup import duplicate_clusters
from dsonet.library.render import render
from dsonet.library.store import Hit, IngestResult, Library, LibraryError

__all__ = ["Hit", "IngestResult", "Library", "LibraryError", "duplicate_clusters", "render"]
