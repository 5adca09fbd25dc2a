"""Lowest layer: BitDelta codes, the profile (the shared space) and the signed CompressedBatch wire format."""

from dsonet.codec.batch import CompressedBatch, decode, make_batch, sign_batch
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
from dsonet.codec.profile import Profile, baseline_digest, default_profile, profile_of
from dsonet.codec.rotation import Rotation, get_rotation

__all__ = [
    "BitDeltaCodes",
    "CompressedBatch",
    "Profile",
    "Rotation",
    "baseline_digest",
    "bytes_per_vector",
    "compress",
    "compression_ratio",
    "decode",
    "default_profile",
    "decompress",
    "decompress_deltas",
    "get_rotation",
    "make_batch",
    "pack_signs",
    "profile_of",
    "sign_batch",
    "unpack_signs",
]
