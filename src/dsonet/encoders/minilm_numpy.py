"""all-MiniLM-L6-v2 in numpy: the default profile's backbone without torch.

The same model sentence-transformers runs (`dsonet.encoders.sentence.minilm`): BERT, 6 layers,
384 wide, 12 heads, erf-GELU, LayerNorm eps 1e-12, mean pooling over the attention mask, L2
normalisation; inputs truncated to 256 tokens. Its weights ship in the package as float16
(`weights/all-minilm-l6-v2/`, 45 MB, Apache-2.0 like upstream) and are widened to float32 for
computing, so a vector differs from the torch path's by rounding only: cosine ≥ 0.9999 on every
text of `tests/encoders/test_numpy_encoder.py` (measured: `dso bench coldstart`).

The token embedding table stays float16 on disk, memory-mapped: a call reads only its tokens'
rows, which keeps a cold start (one query) to the ~40 MB of layer weights.
"""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from dsonet.codec.threads import one_blas_thread
from dsonet.encoders.base import EncoderError, Kind, check_texts, l2_normalise
from dsonet.encoders.wordpiece import WordPiece

MINILM_DIR = "all-minilm-l6-v2"  # the folder under dsonet/encoders/weights/
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
ONE_THREAD_TOKENS = 512  # encodes of at most this many tokens run on one BLAS thread (see `encode`)
TOKEN_BUDGET = 4096  # padded tokens per batch (texts of like length batched together, padded to the longest)
_ERF = tuple(np.float32(c) for c in (0.3275911, 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))
_DTYPES = {"F16": np.float16, "F32": np.float32, "BF16": None, "I64": np.int64}


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as a read-only view of the memory-mapped file: an
    8-byte little-endian header length, a JSON header (dtype, shape, data offsets per name), the data."""
    path = Path(path)
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise EncoderError(f"{path}: tensor {name!r} has dtype {info['dtype']}; expected F16, F32 or I64")
        start, stop = info["data_offsets"]
        out[name] = data[start:stop].view(dtype).reshape(info["shape"])
    return out


def minilm_dir() -> Path:
    """The shipped MiniLM weights' folder (config.json, model.safetensors, vocab.txt)."""
    return Path(str(resources.files("dsonet.encoders").joinpath("weights", MINILM_DIR)))


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, -1, keepdims=True)
    return centred / np.sqrt(var + eps) * gamma + beta


def gelu(x: np.ndarray, chunk: int = 32768) -> np.ndarray:
    """x · Φ(x) with erf (not the tanh approximation), erf by Abramowitz & Stegun 7.1.26 (|error| <
    1.5e-7, float32's own rounding): numpy has no erf, and scipy.special costs 0.2 s to import.
    In place over cache-sized chunks: 2.5× faster than whole-array temporaries (27 against 66 ms
    for 4096 × 1536, as much as the matmul before it)."""
    p, a1, a2, a3, a4, a5 = _ERF
    out = np.empty_like(x)
    flat, flat_out = x.reshape(-1), out.reshape(-1)
    z, tail = np.empty(chunk, np.float32), np.empty(chunk, np.float32)
    for start in range(0, len(flat), chunk):
        xs = flat[start : start + chunk]
        zs, ts = z[: len(xs)], tail[: len(xs)]
        np.abs(xs, out=zs)
        zs *= np.float32(1 / math.sqrt(2))  # z = |x| / √2
        np.multiply(zs, p, out=ts)
        ts += 1
        np.reciprocal(ts, out=ts)  # t = 1 / (1 + p z)
        poly = ts * a5  # the one temporary: t (a1 + t (a2 + t (a3 + t (a4 + t a5))))
        for a in (a4, a3, a2, a1):
            poly += a
            poly *= ts
        np.square(zs, out=zs)
        np.negative(zs, out=zs)
        np.exp(zs, out=zs)
        poly *= zs  # 1 − erf(z) = poly · e^{−z²}
        poly *= 0.5
        np.copysign(poly, xs, out=poly)
        np.subtract(xs >= 0, poly, out=poly)  # Φ(x) = ½(1 + erf(x/√2)): 1 − ½(1 − erf) for x ≥ 0, ½(1 − erf) below
        np.multiply(xs, poly, out=flat_out[start : start + len(xs)])
    return out


class NumpyMiniLM:
    """An `Encoder`: all-MiniLM-L6-v2's sentence embeddings (384 dims), computed in numpy.

    Its id is the sentence-transformers encoder's (``st:all-MiniLM-L6-v2``): the same model in the
    same space, so a Zen head on top keeps the profile's encoder id."""

    def __init__(self, directory: str | Path | None = None):
        path = Path(directory) if directory is not None else minilm_dir()
        try:
            config = json.loads((path / "config.json").read_text())
            weights = read_safetensors(path / "model.safetensors")
            self.tokenizer = WordPiece(path / "vocab.txt")
        except (OSError, ValueError) as exc:
            raise EncoderError(f"cannot load MiniLM from {path}: {exc}; reinstall dsonet") from exc
        self.hidden, self.heads = config["hidden_size"], config["num_attention_heads"]
        self.eps = float(config["layer_norm_eps"])

        def f32(tensor: str | np.ndarray) -> np.ndarray:  # float16 widens exactly
            return np.asarray(weights[tensor] if isinstance(tensor, str) else tensor, np.float32)

        self.word = weights["embeddings.word_embeddings.weight"]  # (V, H) float16, memory-mapped: rows read on use
        self.position = f32("embeddings.position_embeddings.weight")
        self.token_type = f32("embeddings.token_type_embeddings.weight")[0]  # one segment: type 0
        self.emb_ln = (f32("embeddings.LayerNorm.weight"), f32("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(config["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            qkv = [p + f"attention.self.{m}" for m in ("query", "key", "value")]
            self.layers.append({  # (out, in) as stored: x @ w.T is BLAS's transposed product, no copy
                "qkv_w": f32(np.concatenate([weights[n + ".weight"] for n in qkv])),  # (3H, H): one product for q, k, v
                "qkv_b": f32(np.concatenate([weights[n + ".bias"] for n in qkv])),
                "out_w": f32(p + "attention.output.dense.weight"),
                "out_b": f32(p + "attention.output.dense.bias"),
                "ln1": (f32(p + "attention.output.LayerNorm.weight"), f32(p + "attention.output.LayerNorm.bias")),
                "up_w": f32(p + "intermediate.dense.weight"),
                "up_b": f32(p + "intermediate.dense.bias"),
                "down_w": f32(p + "output.dense.weight"),
                "down_b": f32(p + "output.dense.bias"),
                "ln2": (f32(p + "output.LayerNorm.weight"), f32(p + "output.LayerNorm.bias")),
            })

    @property
    def dim(self) -> int:
        return self.hidden

    @property
    def id(self) -> str:
        return "st:all-MiniLM-L6-v2"

    def config(self) -> dict:
        return {"type": "sentence-transformers", "name_or_path": "all-MiniLM-L6-v2", "query_prefix": ""}

    def encode(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        """(n, 384) float32, rows L2-normalised; MiniLM encodes queries and documents alike."""
        texts = check_texts(texts, kind)
        ids = [self.tokenizer.encode(t, MAX_TOKENS) for t in texts]
        out = np.zeros((len(texts), self.hidden), np.float32)
        # a query or a few texts: one BLAS thread. Products this small wait on a second thread's
        # wake-up; on the busy 2-core machine one query took 46 ms on one thread, 570 ms on two.
        small = sum(map(len, ids)) <= ONE_THREAD_TOKENS
        with one_blas_thread() if small else nullcontext():
            self._encode_ids(ids, out)
        return l2_normalise(out)

    def _encode_ids(self, ids: list[list[int]], out: np.ndarray) -> None:
        batch: list[int] = []
        for i in sorted(range(len(ids)), key=lambda i: len(ids[i])):  # like lengths together: little padding
            if batch and (len(batch) + 1) * len(ids[i]) > TOKEN_BUDGET:
                out[batch] = self._forward([ids[j] for j in batch])
                batch = []
            batch.append(i)
        if batch:
            out[batch] = self._forward([ids[j] for j in batch])

    def _forward(self, ids: list[list[int]]) -> np.ndarray:
        """Mean-pooled last hidden states (B, H) of a batch of token id lists (padded to the longest)."""
        b, t, h, nh = len(ids), max(map(len, ids)), self.hidden, self.heads
        tokens = np.zeros((b, t), np.int64)
        mask = np.zeros((b, t), np.float32)
        for i, row in enumerate(ids):
            tokens[i, : len(row)] = row
            mask[i, : len(row)] = 1
        x = np.asarray(self.word[tokens], np.float32) + self.position[:t] + self.token_type  # (B, T, H)
        x = layer_norm(x, *self.emb_ln, self.eps).reshape(b * t, h)
        # padding keys get finfo.min added, as in transformers: their softmax weight is exactly 0
        bias = ((1 - mask) * np.finfo(np.float32).min)[:, None, None, :]  # (B, 1, 1, T)
        scale = np.float32(1 / math.sqrt(h // nh))
        for w in self.layers:
            qkv = x @ w["qkv_w"].T + w["qkv_b"]  # (B·T, 3H)
            qkv = np.ascontiguousarray(qkv.reshape(b, t, 3, nh, h // nh).transpose(2, 0, 3, 1, 4))  # (3, B, nh, T, hd)
            scores = (qkv[0] * scale) @ qkv[1].transpose(0, 1, 3, 2) + bias  # (B, nh, T, T)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ qkv[2]).transpose(0, 2, 1, 3).reshape(b * t, h)  # (B·T, H)
            x = layer_norm(x + context @ w["out_w"].T + w["out_b"], *w["ln1"], self.eps)
            x = layer_norm(x + gelu(x @ w["up_w"].T + w["up_b"]) @ w["down_w"].T + w["down_b"], *w["ln2"], self.eps)
        x = x.reshape(b, t, h)
        return (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)  # (B, H)


@lru_cache(maxsize=1)
def numpy_minilm() -> NumpyMiniLM:
    """The shipped MiniLM, loaded once per process."""
    return NumpyMiniLM()
