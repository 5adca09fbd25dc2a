"""Lowest layer: BitDelta codes and the signed CompressedBatch wire format."""

from dsonet.codec.batch import CompressedBatch, Profile, decode, default_profile, make_batch, sign_batch
from dsonet.codec.bitdelta import (
    BitDeltaCodes,
    bytes_per_vector,
    compress,
    compression_ratio,
    decompress,
    decompress_deltas,
    pack_signs,
    unpack_signs,
)
from dsonet.codec.rotation import Rotation, get_rotation

__all__ = [
    "BitDeltaCodes",
    "CompressedBatch",
    "Profile",
    "Rotation",
    "bytes_per_vector",
    "compress",
    "compression_ratio",
    "decode",
    "default_profile",
    "decompress",
    "decompress_deltas",
    "get_rotation",
    "make_batch",
    "sign_batch",
    "pack_signs",
    "unpack_signs",
]
