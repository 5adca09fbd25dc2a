"""dsonet: Decentralized Semantic Optimization — agents learn experiences and share them.

The public Python API mirrors the `dso` command line; see the README.

Imports sit at the top of a module, so its head shows what it depends on. A function imports
lazily only (1) a heavy optional dependency (a module only an extra installs, as listed in
`dsonet.cli.main.EXTRAS`: torch, transformers, llama_cpp, mcp...; or uvicorn, langchain_core,
huggingface_hub) or a dsonet module that loads one when imported, so that the core install
works without them and does not pay for them; (2) in `dsonet.cli`, a module that
`dso --help` does not load already, so that each command starts fast; (3) scipy's sparse
graph tools in `library.dedup` (a core dependency, but 0.3-0.5 s to import, and `dso node
--help` and `dso search --help` load the library for their defaults). No module imports
itself back through others. `tests/test_import_layers.py` checks all three.
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
