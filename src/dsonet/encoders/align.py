"""Alignment adapters (seeds/001): a map from a model's native space into a profile's canonical space.

Learned from an anchor corpus encoded by both encoders (X: native, Y: canonical), by three
methods, the winner picked by a held-out score:

- ``ridge``: Y ≈ [X, 1] W, W = (XᵀX + αI)⁻¹ XᵀY, α chosen on the held-out anchors;
- ``procrustes``: centred Y ≈ centred X · R with R semi-orthogonal (R = U Vᵀ, XᵀY = U Σ Vᵀ),
  scaled by the least-squares factor; preserves the native geometry exactly;
- ``mlp``: one hidden layer (GELU), cosine loss, trained on the target's top principal
  components (the anchors span at most n directions, and a 7680-wide output layer would be
  most of the cost), then mapped back.

Score: held-out top-1 accuracy of finding each mapped anchor's own canonical vector among the
held-out canonical vectors (ties broken by mean cosine). Adapters are saved under
``cache_dir()/adapters/<source id>__<target id>/`` and found again by those ids.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
from scipy.special import erf

from dsonet.data import gsm8k, split
from dsonet.encoders.base import Encoder, EncoderError, Kind, check_texts, l2_normalise
from dsonet.encoders.cache import cache_dir, cached_encode

Method = Literal["ridge", "procrustes", "mlp"]
METHODS: tuple[Method, ...] = ("ridge", "procrustes", "mlp")
RIDGE_ALPHAS = (0.01, 0.1, 1.0, 10.0)


@dataclass
class Adapter:
    method: Method
    source_id: str
    target_id: str
    d_in: int
    d_out: int
    arrays: dict[str, np.ndarray]
    scores: dict[str, dict] = field(default_factory=dict)  # held-out score of every method tried

    def apply(self, x: np.ndarray) -> np.ndarray:
        """(n, d_in) native vectors -> (n, d_out) canonical unit vectors."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.d_in:
            raise EncoderError(f"adapter {self.source_id!r} -> {self.target_id!r} takes (n, {self.d_in}) vectors, got {x.shape}")
        a = self.arrays
        if self.method == "mlp":
            hidden = _gelu(x @ a["w1"] + a["b1"])  # (n, hidden)
            y = (hidden @ a["w2"] + a["b2"]) @ a["components"] + a["mean"]  # (n, k) -> (n, d_out)
        else:
            y = x @ a["w"] + a["b"]  # (n, d_out)
        return l2_normalise(y)

    def save(self, directory: str | os.PathLike) -> Path:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        np.savez(path / "weights.npz", **self.arrays)
        meta = {"method": self.method, "source_id": self.source_id, "target_id": self.target_id,
                "d_in": self.d_in, "d_out": self.d_out, "scores": self.scores}
        (path / "adapter.json").write_text(json.dumps(meta, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "Adapter":
        path = Path(directory)
        try:
            meta = json.loads((path / "adapter.json").read_text())
            with np.load(path / "weights.npz") as f:
                arrays = {k: f[k] for k in f.files}
        except OSError as exc:
            raise EncoderError(f"no adapter in {path} ({exc}); learn one with `dso align --model M --profile P`") from exc
        return cls(meta["method"], meta["source_id"], meta["target_id"], meta["d_in"], meta["d_out"], arrays, meta["scores"])


def adapter_dir(source_id: str, target_id: str) -> Path:
    safe = lambda s: "".join(c if c.isalnum() or c in "-_." else "_" for c in s)  # noqa: E731
    return cache_dir() / "adapters" / f"{safe(source_id)}__{safe(target_id)}"


def load_adapter(source_id: str, target_id: str) -> Adapter:
    """The adapter saved for this pair of encoder ids (by `dso align` or `Adapter.save(adapter_dir(...))`)."""
    return Adapter.load(adapter_dir(source_id, target_id))


def fit_ridge(x: np.ndarray, y: np.ndarray, alpha: float) -> dict[str, np.ndarray]:
    mx, my = x.mean(0), y.mean(0)
    xc = (x - mx).astype(np.float64)
    w = np.linalg.solve(xc.T @ xc + alpha * np.eye(x.shape[1]), xc.T @ (y - my))  # (d_in, d_out)
    return {"w": w.astype(np.float32), "b": (my - mx @ w).astype(np.float32)}


def fit_procrustes(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    mx, my = x.mean(0), y.mean(0)
    xc, yc = (x - mx).astype(np.float64), (y - my).astype(np.float64)
    u, s, vt = np.linalg.svd(xc.T @ yc, full_matrices=False)  # (d_in, r), (r,), (r, d_out)
    scale = s.sum() / (xc**2).sum()  # least-squares scale of the rotated native vectors
    w = scale * (u @ vt)  # (d_in, d_out), orthonormal columns or rows times the scale
    return {"w": w.astype(np.float32), "b": (my - mx @ w).astype(np.float32)}


def fit_mlp(x: np.ndarray, y: np.ndarray, seed: int = 0, hidden: int = 1024, components: int = 384,
            epochs: int = 40, batch: int = 256, lr: float = 1e-3) -> dict[str, np.ndarray]:
    import torch

    mean = y.mean(0)
    _, _, vt = np.linalg.svd(y - mean, full_matrices=False)
    comps = vt[: min(components, len(vt))].astype(np.float32)  # (k, d_out), orthonormal rows
    target = torch.from_numpy(((y - mean) @ comps.T).astype(np.float32))  # (n, k) coordinates
    mean_t, comps_t = torch.from_numpy(mean.astype(np.float32)), torch.from_numpy(comps)
    y_t, x_t = torch.from_numpy(y.astype(np.float32)), torch.from_numpy(x.astype(np.float32))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small net: thread sync costs more than it saves (10x on a busy machine)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], hidden), torch.nn.GELU(), torch.nn.Linear(hidden, target.shape[1]))
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for rows in torch.randperm(len(x_t), generator=gen).split(batch):
            pred = net(x_t[rows]) @ comps_t + mean_t  # (B, d_out)
            loss = 1 - torch.nn.functional.cosine_similarity(pred, y_t[rows]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.set_num_threads(threads)
    w1, b1, w2, b2 = (p.detach().numpy() for p in net.parameters())
    return {"w1": w1.T.copy(), "b1": b1, "w2": w2.T.copy(), "b2": b2, "components": comps, "mean": mean.astype(np.float32)}


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def held_out_score(mapped: np.ndarray, target: np.ndarray) -> dict[str, float]:
    """Top-1 accuracy of each mapped vector finding its own target, and the mean cosine."""
    target = l2_normalise(target)
    scores = mapped @ target.T  # (n, n)
    return {"top1": float((scores.argmax(1) == np.arange(len(mapped))).mean()),
            "cosine": float(np.diag(scores).mean())}


def fit_adapter(x: np.ndarray, y: np.ndarray, source_id: str, target_id: str,
                methods: Sequence[Method] = METHODS, held_out: float = 0.2, seed: int = 0) -> Adapter:
    """Fit every method on the anchors, score on held-out anchors, refit the winner on all."""
    x, y = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32)
    if len(x) != len(y) or len(x) < 10:
        raise EncoderError(f"anchors: need the same >= 10 texts encoded by both models, got {len(x)} and {len(y)} vectors")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise EncoderError(f"methods must be among {METHODS}, got {bad}")
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(len(x) * (1 - held_out))
    tr, te = order[:cut], order[cut:]
    candidates: dict[str, tuple[dict, dict]] = {}  # name -> (score, fit kwargs)
    for method in methods:
        options = [{"alpha": a} for a in RIDGE_ALPHAS] if method == "ridge" else [{}]
        for opts in options:
            arrays = _fit(method, x[tr], y[tr], seed, **opts)
            score = held_out_score(Adapter(method, source_id, target_id, x.shape[1], y.shape[1], arrays).apply(x[te]), y[te])
            name = method + "".join(f":{k}={v}" for k, v in opts.items())
            candidates[name] = (score, {"method": method, **opts})
    best = max(candidates, key=lambda n: (candidates[n][0]["top1"], candidates[n][0]["cosine"]))
    kwargs = dict(candidates[best][1])
    method = kwargs.pop("method")
    arrays = _fit(method, x, y, seed, **kwargs)
    scores = {n: {**s, "chosen": n == best} for n, (s, _) in candidates.items()}
    return Adapter(method, source_id, target_id, x.shape[1], y.shape[1], arrays, scores)


def _fit(method: Method, x: np.ndarray, y: np.ndarray, seed: int, **opts) -> dict[str, np.ndarray]:
    if method == "ridge":
        return fit_ridge(x, y, **opts)
    if method == "procrustes":
        return fit_procrustes(x, y)
    return fit_mlp(x, y, seed=seed)


class AlignedEncoder:
    """An `Encoder`: a native model followed by its adapter into a profile's space.

    ``target_id`` is the space the vectors live in — what a profile's encoder_id names, so a
    node running this model publishes vectors that nodes on the profile's own encoder can search.
    """

    def __init__(self, base: Encoder, adapter: Adapter):
        if adapter.d_in != base.dim:
            raise EncoderError(f"adapter takes {adapter.d_in}-dim vectors but {base.id!r} makes {base.dim}-dim ones")
        if adapter.source_id != base.id:
            raise EncoderError(f"adapter was learned for {adapter.source_id!r}, not {base.id!r}; run `dso align` for this model")
        self.base, self.adapter = base, adapter

    @classmethod
    def for_profile(cls, base: Encoder, target_id: str) -> "AlignedEncoder":
        return cls(base, load_adapter(base.id, target_id))

    @property
    def dim(self) -> int:
        return self.adapter.d_out

    @property
    def target_id(self) -> str:
        return self.adapter.target_id

    @property
    def id(self) -> str:
        return f"{self.base.id}>{self.adapter.method}>{self.adapter.target_id}"

    def encode(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        texts = check_texts(texts, kind)
        return self.adapter.apply(self.base.encode(texts, kind=kind))

    def cache_parts(self):
        """(base, adapter): `cached_encode` caches the base's vectors and applies the adapter."""
        return self.base, self.adapter.apply


def gsm8k_vectors(encoder: Encoder) -> tuple[np.ndarray, np.ndarray]:
    """All GSM8K questions (as queries) and solutions (as documents), encoded once and cached."""
    items = gsm8k()
    return (cached_encode(encoder, [i.question for i in items], "query"),
            cached_encode(encoder, [i.solution for i in items], "document"))


def anchor_split(held_out: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(anchor, evaluation) GSM8K item indices: the same split the Zen head's training holds out,
    so adapters never see the items that cross-model retrieval is evaluated on."""
    train, held = split(list(range(len(gsm8k()))), held_out=held_out, seed=seed)
    return np.array(train), np.array(held)


def learn_adapter(model: Encoder, target: Encoder, methods: Sequence[Method] = METHODS, seed: int = 0) -> Adapter:
    """Fit an adapter model -> target on the anchor items' questions and solutions."""
    anchors, _ = anchor_split()
    xq, xd = gsm8k_vectors(model)
    yq, yd = gsm8k_vectors(target)
    x = np.concatenate([xq[anchors], xd[anchors]])  # (2A, d_model)
    y = np.concatenate([yq[anchors], yd[anchors]])  # (2A, d_target)
    return fit_adapter(x, y, model.id, target.id, methods=methods, seed=seed)
