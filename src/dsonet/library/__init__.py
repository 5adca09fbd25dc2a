"""The node's local experience library: storage, retrieval over compressed codes, merge."""

from dsonet.library.dedup import duplicate_clusters

__all__ = ["duplicate_clusters"]
