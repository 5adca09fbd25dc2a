"""The Zen head in numpy, and the default profile's encoder without torch: MiniLM (numpy) + head.

    h ∈ R^384 → Linear(384 → 288) → GELU → LayerNorm → Linear(→ 7680) → LayerNorm → L2-normalise

the layers of `dsonet.encoders.zen.ZenHead` (LayerNorm eps 1e-5, torch's default), in float32
from the same float16 file, with the same weight digest: `NumpyZen` has the torch encoder's id,
baseline and support, so the profile and the wire do not change with the path that computed a
vector. Training and other backbones stay on the torch path (`ZenReranker`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from dsonet.codec.profile import baseline_digest
from dsonet.encoders.base import Encoder, EncoderError, Kind, check_texts
from dsonet.encoders.minilm_numpy import gelu, layer_norm, read_safetensors

HEAD_EPS = 1e-5  # torch.nn.LayerNorm's default, which ZenHead uses
_NAMES = ("w1.weight", "w1.bias", "ln1.weight", "ln1.bias", "w2.weight", "w2.bias", "ln2.weight", "ln2.bias")


class NumpyZenHead:
    """The projection head alone: (B, d_in) base embeddings -> (B, d_out) unit vectors."""

    def __init__(self, weights: dict[str, np.ndarray], tag: str = "init"):
        missing = [n for n in _NAMES if n not in weights]
        if missing:
            raise EncoderError(f"Zen head weights lack {', '.join(missing)}; expected a file written by save_pretrained")
        self.weights = {n: np.ascontiguousarray(weights[n], np.float32) for n in _NAMES}  # float16 widens exactly
        self.d_hidden, self.d_in = self.weights["w1.weight"].shape
        self.d_out = len(self.weights["w2.bias"])
        self.tag = tag

    def digest(self) -> str:
        """SHA-256 of the weights as float32, names in order: `ZenHead.digest`'s, byte for byte."""
        h = hashlib.sha256()
        for name in sorted(self.weights):
            tensor = self.weights[name]
            h.update(f"{name}:{tuple(tensor.shape)}\n".encode())
            h.update(np.ascontiguousarray(tensor, "<f4").data)  # float32 already: no copy
        return h.hexdigest()

    def project(self, base: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        """Apply the head to base embeddings (n, d_in) -> float32 (n, d_out)."""
        base = np.asarray(base, dtype=np.float32)
        if base.ndim != 2 or base.shape[1] != self.d_in:
            raise EncoderError(f"base embeddings must have shape (n, {self.d_in}), got {base.shape}")
        w = self.weights
        out = np.empty((len(base), self.d_out), np.float32)
        for i in range(0, len(base), batch_size):
            z1 = gelu(base[i : i + batch_size] @ w["w1.weight"].T + w["w1.bias"])  # (B, d_hidden)
            z2 = layer_norm(z1, w["ln1.weight"], w["ln1.bias"], HEAD_EPS)
            e = layer_norm(z2 @ w["w2.weight"].T + w["w2.bias"], w["ln2.weight"], w["ln2.bias"], HEAD_EPS)  # (B, d_out)
            out[i : i + batch_size] = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        return out

    def support(self) -> np.ndarray:
        """(d_hidden + 2, d_out) vectors spanning every output's subspace (see `ZenHead.support`)."""
        w2, b2 = self.weights["w2.weight"].astype(np.float64), self.weights["w2.bias"].astype(np.float64)
        gamma, beta = self.weights["ln2.weight"].astype(np.float64), self.weights["ln2.bias"].astype(np.float64)
        centred = np.concatenate([w2, b2[:, None]], axis=1)
        centred -= centred.mean(axis=0, keepdims=True)
        return np.concatenate([(gamma[:, None] * centred).T, beta[None, :]]).astype(np.float32)


class HeadOverBackbone:
    """An `Encoder` made of a backbone and a Zen head (numpy's or torch's: ``d_in``, ``d_out``, ``digest``,
    ``project``, ``support``), with the profile's baseline: what `NumpyZen` and `ZenReranker` share, so the
    two paths give one id, dim, baseline and support for the same weights."""

    def __init__(self, backbone: Encoder, head, baseline: np.ndarray | None = None, hint: str = ""):
        if head.d_in != backbone.dim:
            raise EncoderError(f"head.d_in={head.d_in} does not match the backbone {backbone.id!r} "
                               f"dim={backbone.dim}{hint}")
        if baseline is not None:
            baseline = np.ascontiguousarray(baseline, dtype=np.float32)
            if baseline.shape != (head.d_out,) or not np.isfinite(baseline).all():
                raise EncoderError(f"baseline must be {head.d_out} finite floats, got shape {baseline.shape}")
        self.backbone, self.head, self._baseline = backbone, head, baseline
        self._digest = head.digest()  # the head is frozen here: hash its weights once

    @property
    def dim(self) -> int:
        return self.head.d_out

    @property
    def id(self) -> str:
        return f"{self.backbone.id}+zen{self.head.d_out}:{self._digest[:12]}"

    @property
    def baseline(self) -> np.ndarray | None:
        """The profile's fixed BitDelta baseline ē (float32, (dim,)), or None when the head has none."""
        return None if self._baseline is None else self._baseline.copy()

    @property
    def baseline_hash(self) -> str | None:
        """SHA-256 (hex) of the baseline's float32 little-endian bytes: how a profile names it."""
        return None if self._baseline is None else baseline_digest(self._baseline)

    def encode(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        texts = check_texts(texts, kind)
        return self.head.project(self.backbone.encode(texts, kind=kind))

    def support(self) -> np.ndarray:
        """Vectors spanning the subspace every output lies in (see `ZenHead.support`)."""
        return self.head.support()

    def cache_parts(self):
        """(backbone, head): `cached_encode` caches the backbone's vectors and applies the head."""
        return self.backbone, self.head.project


class NumpyZen(HeadOverBackbone):
    """A numpy backbone -> `NumpyZenHead`: the torch `ZenReranker`'s id, dim, baseline and support for
    the same weights, without torch."""

    @classmethod
    def from_pretrained(cls, directory: str | Path, backbone: Encoder) -> "NumpyZen":
        """The head a `ZenReranker.save_pretrained` folder holds, over ``backbone``."""
        path = Path(directory)
        try:
            config = json.loads((path / "config.json").read_text())
            head = NumpyZenHead(read_safetensors(path / "model.safetensors"), tag=config["head"].get("tag", "init"))
        except (OSError, KeyError, ValueError) as exc:
            raise EncoderError(f"{path}: not a Zen head written by save_pretrained ({exc})") from exc
        baseline_file = path / "baseline.safetensors"
        baseline = read_safetensors(baseline_file)["baseline"] if baseline_file.exists() else None
        return cls(backbone, head, baseline)
