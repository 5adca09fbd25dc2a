"""Zen-Reranker: a backbone encoder plus the paper's projection head into the canonical space (seeds/002).

    h ∈ R^{d_in} → Linear(d_in → ¾·d_in) → GELU → LayerNorm → Linear(→ 7680) → LayerNorm → L2-normalise

d_in comes from the backbone (its ``dim``, i.e. its config's hidden size), never a constant:
Qwen3-Embedding-8B's real width is 4096, MiniLM's 384. With d_in = 8192 the two linear layers
hold the paper's 97,531,392 weights and biases (the paper's count leaves out the LayerNorms).

Saved in the Hugging Face convention: ``config.json`` (backbone spec + head shape + tag) and
``model.safetensors`` (head weights only; the backbone is loaded by its own name), so
``ZenReranker.from_pretrained("dir-or-hub-id")`` rebuilds the whole encoder. An optional
``baseline.safetensors`` holds the profile's fixed BitDelta baseline ē (the mean of the head's
outputs over its training corpus): it belongs to the space, so it ships with the weights.

The encoder's id names the *weights*, not the recipe that trained them: two machines that
train by the same recipe on other CPUs or BLAS builds get other floats, and an id from the
recipe would let them read each other's codes wrongly. ``…+zen7680:<sha256[:12]>``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dsonet.encoders.base import Encoder, EncoderError
from dsonet.encoders.backbones import backbone_from_config, encoder_config
from dsonet.encoders.zen_numpy import HeadOverBackbone

CANONICAL_DIM = 7680  # seeds/001: the protocol's canonical dimension
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
BASELINE_NAME = "baseline.safetensors"


class ZenHead(nn.Module):
    """The projection head alone: (B, d_in) base embeddings -> (B, d_out) unit vectors."""

    def __init__(self, d_in: int, d_out: int = CANONICAL_DIM, d_hidden: int | None = None, tag: str = "init"):
        super().__init__()
        if d_in < 4 or d_out < 1:
            raise EncoderError(f"ZenHead needs d_in >= 4 and d_out >= 1, got d_in={d_in}, d_out={d_out}")
        self.d_in, self.d_out = int(d_in), int(d_out)
        self.d_hidden = int(d_hidden) if d_hidden else 3 * self.d_in // 4  # paper: 6144 = ¾ · 8192
        self.tag = tag  # provenance: the recipe that produced the weights (the id names the weights themselves)
        self.w1 = nn.Linear(self.d_in, self.d_hidden)
        self.ln1 = nn.LayerNorm(self.d_hidden)
        self.w2 = nn.Linear(self.d_hidden, self.d_out)
        self.ln2 = nn.LayerNorm(self.d_out)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z1 = F.gelu(self.w1(h))  # (B, d_hidden)   z1 = GELU(W1 h + b1)
        z2 = self.ln1(z1)  # (B, d_hidden)          z2 = LayerNorm(z1)
        z3 = self.w2(z2)  # (B, d_out)              z3 = W2 z2 + b2
        return F.normalize(self.ln2(z3), dim=-1)  # (B, d_out)  e = LN(z3) / ||LN(z3)||

    @torch.no_grad()
    def digest(self) -> str:
        """SHA-256 of the weights as float32 (names, shapes and little-endian bytes, in name order):
        the same whatever file format or precision they were stored in."""
        h = hashlib.sha256()
        for name, tensor in sorted(self.state_dict().items()):
            h.update(f"{name}:{tuple(tensor.shape)}\n".encode())
            h.update(tensor.detach().float().cpu().contiguous().numpy().astype("<f4").tobytes())
        return h.hexdigest()

    def linear_parameter_count(self) -> int:
        """Weights and biases of the two linear layers: the quantity the paper counts."""
        return sum(p.numel() for layer in (self.w1, self.w2) for p in layer.parameters())

    def config(self) -> dict:
        return {"d_in": self.d_in, "d_hidden": self.d_hidden, "d_out": self.d_out, "tag": self.tag}

    @torch.no_grad()
    def support(self) -> np.ndarray:
        """(d_hidden + 2, d_out) vectors spanning every output's subspace. LN(z) = γ ⊙ C z / σ(z) + β
        (C subtracts the mean) and z = W2 z2 + b2, so e lies in span(γ ⊙ C W2, γ ⊙ C b2, β) whatever
        the input: a code's decoder can use that (`dsonet.library.index.stages.Support`)."""
        w2, b2 = self.w2.weight.double(), self.w2.bias.double()
        gamma, beta = self.ln2.weight.double(), self.ln2.bias.double()
        centred = torch.cat([w2, b2[:, None]], dim=1)
        centred = centred - centred.mean(dim=0, keepdim=True)
        return torch.cat([(gamma[:, None] * centred).T, beta[None, :]]).float().cpu().numpy()

    @torch.no_grad()
    def project(self, base: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        """Apply the head to a float array of base embeddings (n, d_in) -> float32 (n, d_out)."""
        base = np.asarray(base, dtype=np.float32)
        if base.ndim != 2 or base.shape[1] != self.d_in:
            raise EncoderError(f"base embeddings must have shape (n, {self.d_in}), got {base.shape}")
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        out = [self(torch.from_numpy(base[i : i + batch_size]).to(device)).cpu().numpy() for i in range(0, len(base), batch_size)]
        self.train(was_training)
        return np.concatenate(out) if out else np.zeros((0, self.d_out), dtype=np.float32)


class ZenReranker(HeadOverBackbone):
    """An `Encoder`: backbone (frozen) -> ZenHead. ``ZenReranker(backbone, head, baseline=None)``.

    ``baseline``: the profile's fixed BitDelta baseline (d_out,) that ships with the head, or None.
    """

    def __init__(self, backbone: Encoder, head: ZenHead, baseline: np.ndarray | None = None):
        super().__init__(backbone, head.eval(), baseline, hint="; build the head with ZenHead(d_in=backbone.dim)")

    @classmethod
    def for_backbone(cls, backbone: Encoder, d_out: int = CANONICAL_DIM, seed: int = 0) -> "ZenReranker":
        """A freshly initialised head sized from the backbone's dim."""
        torch.manual_seed(seed)
        return cls(backbone, ZenHead(backbone.dim, d_out, tag=f"init{seed}"))

    def save_pretrained(self, directory: str | os.PathLike, half: bool = False) -> Path:
        """Write config.json, model.safetensors (head weights; float16 with ``half``) and the
        baseline, if any, into ``directory``."""
        return save_head(directory, self.head, encoder_config(self.backbone), self._baseline, half=half)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, backbone: Encoder | None = None,
                        device: str | None = None,
                        load_backbone: Callable[[dict, str | None], Encoder] = backbone_from_config) -> "ZenReranker":
        """Load from a directory written by `save_pretrained`, or a Hugging Face hub id.

        ``backbone`` overrides the one named in config.json (e.g. an already loaded MiniLM);
        ``load_backbone`` builds the named one (`dsonet.encoders.registry` passes its own, which
        knows every encoder, a Zen-Reranker too).
        """
        config, head, baseline = load_head(name_or_path, device=device)
        if backbone is None:
            backbone = load_backbone(config["backbone"], device)
        return cls(backbone, head, baseline)


def save_head(directory: str | os.PathLike, head: ZenHead, backbone_config: dict, baseline: np.ndarray | None = None,
              half: bool = False) -> Path:
    """config.json (backbone config + head shape), model.safetensors (head weights, float16 with
    ``half``) and, when given, baseline.safetensors (float32: its hash names it on the wire)."""
    from safetensors.numpy import save_file as save_numpy
    from safetensors.torch import save_file

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    config = {"architecture": "ZenReranker", "backbone": backbone_config, "head": head.config()}
    dtype = torch.float16 if half else torch.float32
    state = {k: v.detach().cpu().to(dtype).contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(path / WEIGHTS_NAME), metadata={"format": "pt"})
    if baseline is not None:
        save_numpy({"baseline": np.ascontiguousarray(baseline, dtype=np.float32)}, str(path / BASELINE_NAME))
    (path / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return path


def load_head(name_or_path: str | os.PathLike, device: str | None = None) -> tuple[dict, ZenHead, np.ndarray | None]:
    """Read (config dict, ZenHead, baseline or None) from a local directory or the hub. Weights
    stored as float16 are widened to float32 (exactly) for computing."""
    from safetensors.numpy import load_file as load_numpy
    from safetensors.torch import load_file

    path = Path(name_or_path)
    if not path.is_dir():
        path = _download(str(name_or_path))
    try:
        config = json.loads((path / CONFIG_NAME).read_text())
        h = config["head"]
        head = ZenHead(h["d_in"], h["d_out"], h["d_hidden"], tag=h.get("tag", "init"))
    except (OSError, KeyError, ValueError) as exc:
        raise EncoderError(f"{path / CONFIG_NAME}: not a ZenReranker config ({exc}); write one with save_pretrained") from exc
    head.load_state_dict({k: v.float() for k, v in load_file(str(path / WEIGHTS_NAME)).items()})
    baseline = load_numpy(str(path / BASELINE_NAME))["baseline"] if (path / BASELINE_NAME).exists() else None
    return config, head.to(device or "cpu").eval(), baseline


def _download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, allow_patterns=[CONFIG_NAME, WEIGHTS_NAME, BASELINE_NAME]))
    except Exception as exc:  # offline, unknown repo, auth...: one message with the fix
        raise EncoderError(
            f"cannot load Zen-Reranker {repo_id!r}: not a local directory and the hub download failed ({exc}); "
            f"pass a directory written by save_pretrained, or go online"
        ) from exc
