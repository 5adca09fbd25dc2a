"""The node's local experience library: storage, retrieval over compressed codes, merge."""

from dsonet.library.view.dedup import duplicate_clusters
from dsonet.library.errors import LibraryError, StorageError
from dsonet.library.view.merge import MergeRule
from dsonet.library.policy import RetrievalPolicy, default_min_similarity, estimate_tokens
from dsonet.library.store.records import IngestResult
from dsonet.library.admitted import Admitted
from dsonet.library.hits import Hit, Hits
from dsonet.library.library import Library

__all__ = ["Admitted", "Hit", "Hits", "IngestResult", "Library", "LibraryError", "MergeRule", "RetrievalPolicy",
           "StorageError", "default_min_similarity", "duplicate_clusters", "estimate_tokens"]
