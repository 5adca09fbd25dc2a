"""BitDelta: one bit per dimension plus one float32 scale per group (seeds/004).

For a batch E (M x d) with baseline ē (the batch mean unless given):

    Δ = E − ē,  split into G = d/g groups of g coordinates
    α_j = ‖Δ_j‖₁ / g            (float32; the least-squares optimal scale, Theorem in seeds/004)
    s_j = sign(Δ_j), sign(0) = +1, packed little-endian into ⌈g/32⌉ uint32 words
    ê   = ē + [α_1 s_1; …; α_G s_G]

Bit k of word w of a group holds coordinate 32·w + k of that group; a set bit means +1.

With ``rotation_seed`` set, each group of Δ is rotated by a seeded orthogonal map before quantisation and
rotated back on decompression (see `dsonet.codec.rotation`). The code has the same size.

The per-vector work runs in C (`dsonet.codec.kernels`; numpy where the extension is not built): one fused pass per vector computes
Δ, its signs and its group scales in registers, so the floats are read from memory once.
Batches are split into chunks of rows that run on all cores.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from dsonet.codec import kernels
from dsonet.codec.rotation import Rotation, get_rotation
from dsonet.codec.threads import run_chunks
from dsonet.errors import CodecError

_CHUNK_ROWS = 64  # rows per task: hides the thread hand-off; a rotated chunk's 2 MB scratch stays in cache


@dataclass(frozen=True)
class BitDeltaCodes:
    """A compressed batch of M vectors of dimension d with group size g."""

    signs: np.ndarray  # (M, G, W) uint32, W = ceil(g / 32)
    scales: np.ndarray  # (M, G) float32
    baseline: np.ndarray  # (d,) float32, the ē the deltas were taken against
    group_size: int
    rotation_seed: int | None = None

    @property
    def dim(self) -> int:
        return int(self.baseline.shape[0])

    @property
    def n_groups(self) -> int:
        return self.dim // self.group_size

    def __len__(self) -> int:
        return int(self.scales.shape[0])

    @property
    def bytes_per_vector(self) -> int:
        """Sign words plus scales; the baseline is shared by the batch and not counted."""
        return bytes_per_vector(self.dim, self.group_size)

    def __getitem__(self, rows) -> "BitDeltaCodes":
        """A subset of the vectors (index, slice or mask), sharing the baseline."""
        rows = np.atleast_1d(np.arange(len(self))[rows])
        return BitDeltaCodes(self.signs[rows], self.scales[rows], self.baseline, self.group_size, self.rotation_seed)


ENCODES_MIN_COSINE = 0.9  # `code_agreement` below this: the vector does not encode its text


def words_per_group(group_size: int) -> int:
    return -(-group_size // 32)


def bytes_per_vector(dim: int, group_size: int) -> int:
    """Exact on-wire size of one code: 4 bytes per sign word, 4 per scale."""
    n_groups = dim // group_size
    return 4 * n_groups * words_per_group(group_size) + 4 * n_groups


def compression_ratio(group_size: int) -> float:
    """Float32 size over code size when g is a multiple of 32: 32g / (g + 32) (Proposition, seeds/004)."""
    return 32 * group_size / (group_size + 32)


def check_group_size(dim: int, group_size: int) -> None:
    if group_size < 1 or dim % group_size:
        raise CodecError(
            f"group_size must divide the dimension: dim={dim}, group_size={group_size}; "
            f"pick a divisor of {dim}, e.g. {dim} (one scale per vector) or 128"
        )


def _as_matrix(embeddings: np.ndarray) -> np.ndarray:
    e = np.asarray(embeddings)
    if e.ndim != 2:
        raise CodecError(f"embeddings must be a 2-D array (M, d), got shape {e.shape}")
    if e.shape[0] == 0 or e.shape[1] == 0:
        raise CodecError(f"embeddings must be non-empty, got shape {e.shape}")
    if not np.issubdtype(e.dtype, np.floating):
        raise CodecError(f"embeddings must be floating point, got dtype {e.dtype}")
    return e.astype(np.float32, copy=False)


def _raise_non_finite(e: np.ndarray) -> None:
    bad = np.argwhere(~np.isfinite(e))
    where = f" (first at row {bad[0][0]}, column {bad[0][1]})" if len(bad) else " (magnitudes near float32's limit)"
    raise CodecError(f"embeddings contain NaN or Inf{where}; encoders must emit finite, normalised vectors")


def pack_signs(positive: np.ndarray) -> np.ndarray:
    """(M, G, g) bool -> (M, G, W) little-endian uint32 words."""
    m, n_groups, g = positive.shape
    pad = words_per_group(g) * 32 - g
    if pad:
        positive = np.concatenate([positive, np.zeros((m, n_groups, pad), dtype=bool)], axis=-1)
    packed = np.packbits(positive, axis=-1, bitorder="little")  # (M, G, 4W) bytes
    return np.ascontiguousarray(packed).view("<u4")


def unpack_signs(words: np.ndarray, group_size: int) -> np.ndarray:
    """(M, G, W) uint32 -> (M, G, g) float32 of ±1."""
    words = np.ascontiguousarray(words, dtype="<u4")
    bits = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little", count=group_size)
    return bits.astype(np.float32) * 2.0 - 1.0


def _rotation(dim: int, group_size: int, seed: int | None) -> Rotation | None:
    """Rotated BitDelta rotates each group by itself (see `dsonet.codec.rotation`)."""
    return None if seed is None else get_rotation(dim, seed, group_size)


class _Scratch(threading.local):
    """Per-thread reusable chunk buffers: fresh allocations would page-fault on every chunk."""

    buf: np.ndarray | None = None  # each thread's own once it has asked (a class default, as threading.local reads it)

    def buffer(self, shape: tuple[int, int]) -> np.ndarray:
        buf = self.buf
        if buf is None or buf.size < shape[0] * shape[1]:
            buf = self.buf = np.empty(shape[0] * shape[1], dtype=np.float32)
        return buf[: shape[0] * shape[1]].reshape(shape)


_scratch = _Scratch()


def _mean(e: np.ndarray) -> np.ndarray:
    """The batch mean, chunked over our threads; a BLAS call here would leave OpenBLAS's threads
    spinning on the cores the compress pass needs next (measured: 30% slower)."""
    partial_sums = np.empty((-(-len(e) // _CHUNK_ROWS), e.shape[1]), dtype=np.float32)

    def rows(start: int, stop: int) -> None:
        np.sum(e[start:stop], axis=0, out=partial_sums[start // _CHUNK_ROWS])

    run_chunks(rows, len(e), _CHUNK_ROWS)
    return (partial_sums.sum(axis=0, dtype=np.float64) / len(e)).astype(np.float32)


def compress(
    embeddings: np.ndarray,
    group_size: int,
    baseline: np.ndarray | None = None,
    rotation_seed: int | None = None,
) -> BitDeltaCodes:
    """Compress a batch (M, d) of float vectors to BitDelta codes.

    ``baseline`` defaults to the batch mean. ``rotation_seed`` selects rotated BitDelta.
    """
    e = np.ascontiguousarray(_as_matrix(embeddings))
    m, d = e.shape
    check_group_size(d, group_size)
    if baseline is None:
        base = _mean(e)
    else:
        base = np.asarray(baseline, dtype=np.float32)
        if base.shape != (d,):
            raise CodecError(f"baseline must have shape ({d},) to match the embeddings, got {base.shape}")
        if not np.isfinite(base).all():
            raise CodecError("baseline contains NaN or Inf")
    rotation = _rotation(d, group_size, rotation_seed)
    signs = np.empty((m, d // group_size, words_per_group(group_size)), dtype="<u4")
    scales = np.empty((m, d // group_size), dtype=np.float32)

    def rows(start: int, stop: int) -> None:
        x, b = e[start:stop], base
        if rotation is not None:
            x, b = rotation.apply(x, base, out=_scratch.buffer((stop - start, d))), None
        kernels.quantize(x, b, stop - start, d, group_size, signs[start:stop], scales[start:stop])

    run_chunks(rows, m, _CHUNK_ROWS)
    # NaN and Inf propagate into the scales, so validating them costs nothing on the hot path
    if not np.isfinite(scales).all():
        _raise_non_finite(e)
    return BitDeltaCodes(signs, scales, base, int(group_size), None if rotation_seed is None else int(rotation_seed))


def code_agreement(ours: np.ndarray, sent: np.ndarray, group_size: int, baseline: np.ndarray,
                   rotation_seed: int | None) -> np.ndarray:
    """Cosine between each sent ê (M, d) and the code of our own encoding of the same text (M, d),
    compressed as the sender had to (same baseline, group size and rotation): an honest sender with
    the profile's encoder reproduces its code (≈ 1.0); a vector for another text shows. DeltaSoup's
    re-encoding check and a JSONL import both ask it."""
    rebuilt = decompress(compress(ours, group_size, baseline=baseline, rotation_seed=rotation_seed))
    sent = np.asarray(sent, np.float32)
    num = np.einsum("ij,ij->i", rebuilt, sent)
    den = np.linalg.norm(rebuilt, axis=1) * np.linalg.norm(sent, axis=1)
    return (num / np.maximum(den, 1e-12)).astype(np.float32)


def decompress_deltas(codes: BitDeltaCodes) -> np.ndarray:
    """The reconstructed deltas α_j s_j, (M, d) float32, in the code's own (possibly rotated) frame."""
    return _dequantize(codes, None, add_baseline=False)


def decompress(codes: BitDeltaCodes, out: np.ndarray | None = None) -> np.ndarray:
    """Reconstruct ê = ē + Δ̂ for every vector: (M, d) float32, written into ``out`` if given."""
    return _dequantize(codes, _rotation(codes.dim, codes.group_size, codes.rotation_seed), True, out)


def _dequantize(codes: BitDeltaCodes, rotation: Rotation | None, add_baseline: bool, out: np.ndarray | None = None) -> np.ndarray:
    m, d, g = len(codes), codes.dim, codes.group_size
    out = np.empty((m, d), dtype=np.float32) if out is None else out
    if out.shape != (m, d) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise CodecError(f"out must be a C-contiguous float32 array of shape {(m, d)}, got {out.dtype} {out.shape}")
    signs = np.ascontiguousarray(codes.signs, dtype="<u4")
    scales = np.ascontiguousarray(codes.scales, dtype=np.float32)
    base = codes.baseline if add_baseline and rotation is None else None

    def rows(start: int, stop: int) -> None:
        if rotation is None:
            kernels.dequantize(signs[start:stop], scales[start:stop], base, stop - start, d, g, out[start:stop])
            return
        delta = _scratch.buffer((stop - start, d))
        kernels.dequantize(signs[start:stop], scales[start:stop], None, stop - start, d, g, delta)
        rotation.invert(delta, codes.baseline, out=out[start:stop])

    run_chunks(rows, m, _CHUNK_ROWS)
    return out
