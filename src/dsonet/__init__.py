"""dsonet: Decentralized Semantic Optimization — agents learn experiences and share them.

The public Python API mirrors the `dso` command line; see the README.
"""

from dsonet.codec import CompressedBatch, Profile, compress, decode, decompress, make_batch, sign_batch
from dsonet.errors import BatchError, CodecError, DsoError
from dsonet.experience import Experience, Provenance
from dsonet.identity import NodeIdentity

__version__ = "0.1.0"

__all__ = [
    "BatchError",
    "CodecError",
    "CompressedBatch",
    "DsoError",
    "Experience",
    "NodeIdentity",
    "Profile",
    "Provenance",
    "compress",
    "decode",
    "decompress",
    "make_batch",
    "sign_batch",
]
