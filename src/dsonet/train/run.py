"""Run the three stages, in one process or under torchrun (gloo on CPU, DistributedDataParallel).

    train(config, out_dir)   # writes out_dir/{config.json, model.safetensors, metrics.json}

Under ``torchrun --nproc_per_node=N`` every rank draws the same global batch and trains on its
slice; DDP averages the gradients, so the ranks' weights stay identical. Rank 0 writes a
checkpoint every ``checkpoint_every`` steps and at each stage's end; a run started again in
the same directory with the same config resumes where the last checkpoint left off.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from dsonet.encoders.backbones import encoder_config
from dsonet.encoders.registry import spec_config
from dsonet.encoders.zen import ZenHead, save_head
from dsonet.errors import DsoError
from dsonet.train.config import TrainConfig
from dsonet.train.data import TrainData, build_data
from dsonet.train.stages import STAGES

CHECKPOINT = "checkpoint.pt"
DATA = "data.npz"


class TrainError(DsoError, ValueError):
    """A training run that cannot start or resume as asked."""


class Trainer:
    """Holds the head, its (possibly DDP-wrapped) model, the data and the run's progress."""

    def __init__(self, config: TrainConfig, data: TrainData, out: Path, max_steps: int | None,
                 log: Callable[[str], None]):
        self.config, self.data, self.out, self.log = config, data, out, log
        self.rank = torch.distributed.get_rank() if _distributed() else 0
        self.world = torch.distributed.get_world_size() if _distributed() else 1
        self.device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
        torch.manual_seed(config.seed)
        self.head = ZenHead(data.d_in, config.d_out, tag=config.recipe_hash()).to(self.device)
        ddp = torch.nn.parallel.DistributedDataParallel
        self.model = ddp(self.head, device_ids=[self.device] if self.device.type == "cuda" else None) if self.world > 1 else self.head
        self.budget = max_steps  # optimisation steps this invocation may still take (None: no limit)
        self.metrics: dict[str, dict] = {}
        self.negatives: np.ndarray | None = None
        self.reference: dict | None = None  # stage 3's frozen start (L_keep), kept across a resume
        self.last_parts: dict[str, float] = {}
        self.resume: dict | None = None
        path = out / CHECKPOINT
        if path.exists():
            ckpt = torch.load(path, weights_only=False, map_location=self.device)
            if ckpt["recipe"] != config.recipe_hash():
                raise TrainError(f"{path} was written by a different config (recipe {ckpt['recipe']}, now "
                                 f"{config.recipe_hash()}); use another --out directory or delete the checkpoint")
            self.head.load_state_dict(ckpt["head"])
            self.metrics, self.negatives, self.resume = ckpt["metrics"], ckpt["negatives"], ckpt
            self.reference = ckpt.get("reference")
            log(f"resuming at stage {ckpt['stage']} step {ckpt['step']}")

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)

    def starts(self, stage: int) -> bool:
        """Whether ``stage`` is about to run from its first step (not resumed midway, not done)."""
        return self.budget != 0 and (self.resume is None or (self.resume["stage"] == stage and self.resume["step"] == 0)
                                     or self.resume["stage"] < stage)

    def fit(self, stage: int, steps: int, lr: float, warmup: int, loss_at: Callable[[int], torch.Tensor],
            metric: Callable[[], dict]) -> None:
        """AdamW with linear warm-up and gradient clipping (paper); checkpoints; before/after metrics."""
        if self.budget == 0 or (self.resume and self.resume["stage"] > stage):
            return
        cfg = self.config
        opt = torch.optim.AdamW(self.head.parameters(), lr=lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
        start = 0
        if self.resume and self.resume["stage"] == stage and self.resume["optimizer"] is not None:
            opt.load_state_dict(self.resume["optimizer"])
            start = self.resume["step"]
        self.resume = None
        key = f"stage{stage}"
        if start == 0:
            self.metrics[key] = {"before": metric()}
            self.log(f"stage {stage} before: {_fmt(self.metrics[key]['before'])}")
        t0, step = time.perf_counter(), start
        self.head.train()
        while step < steps:
            for group in opt.param_groups:
                group["lr"] = lr * min(1.0, (step + 1) / warmup) if warmup else lr
            loss = loss_at(step)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.head.parameters(), cfg.grad_clip)
            opt.step()
            step += 1
            if step % max(1, steps // 10) == 0 or step == steps:
                self.log(f"stage {stage} step {step}/{steps} loss {loss.item():.4f} {_fmt(self.last_parts)}".rstrip())
            if self.budget is not None:
                self.budget -= 1
            if step == steps or step % cfg.checkpoint_every == 0 or self.budget == 0:
                self._checkpoint(stage, step, opt)
            if self.budget == 0 and step < steps:
                self.log(f"stopping at stage {stage} step {step} (max steps); run again to resume")
                return
        self.last_parts = {}
        self.metrics[key]["after"] = metric()
        self.metrics[key]["seconds"] = self.metrics[key].get("seconds", 0) + time.perf_counter() - t0
        self.log(f"stage {stage} after:  {_fmt(self.metrics[key]['after'])}")
        self._checkpoint(stage + 1, 0, None)

    def _checkpoint(self, stage: int, step: int, opt) -> None:
        if self.rank != 0:
            return
        head = {k: v.cpu() for k, v in self.head.state_dict().items()}
        state = {"recipe": self.config.recipe_hash(), "stage": stage, "step": step, "head": head,
                 "optimizer": opt.state_dict() if opt else None, "metrics": self.metrics, "negatives": self.negatives,
                 "reference": self.reference}
        tmp = self.out / f"{CHECKPOINT}.tmp"
        torch.save(state, tmp)
        tmp.replace(self.out / CHECKPOINT)

    @property
    def finished(self) -> bool:
        return all("after" in self.metrics.get(f"stage{s}", {}) for s in (1, 2, 3))


@dataclass(frozen=True)
class TrainResult:
    head: ZenHead  # this rank's head (identical on every rank)
    metrics: dict  # {"stage1": {"before": {...}, "after": {...}, "seconds": s}, ...}
    finished: bool  # False when max_steps stopped the run early


def train(config: TrainConfig, out_dir: str | Path, max_steps: int | None = None, encoder=None,
          log: Callable[[str], None] | None = None) -> TrainResult:
    """Train the head through the three stages.

    ``encoder``: an already loaded backbone (else the one ``config.backbone`` names).
    ``max_steps``: stop after that many optimisation steps; call again to resume.
    When finished, out_dir holds a `ZenReranker` (config.json, model.safetensors and the profile's
    baseline, baseline.safetensors: `corpus_baseline`) and metrics.json.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rank = torch.distributed.get_rank() if _distributed() else 0
    say = (log or _stderr) if rank == 0 else (lambda _msg: None)
    data_path = out / DATA
    if rank == 0 and not data_path.exists():
        say(f"encoding GSM8K with the backbone {config.backbone!r} (cached after the first time)")
        build_data(config, encoder).save(data_path)
    _barrier()
    try:
        data = TrainData.load(data_path)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    if rank == 0:
        say(f"config: {json.dumps(asdict(config))}")
    trainer = Trainer(config, data, out, max_steps, say)
    for stage in STAGES:
        stage(trainer)
    _barrier()
    if trainer.finished and rank == 0:
        save_head(out, trainer.head, encoder_config(encoder) if encoder is not None else spec_config(config.backbone),
                  corpus_baseline(trainer.head, data))
        (out / "metrics.json").write_text(json.dumps({"config": asdict(config), "recipe": config.recipe_hash(),
                                                      "world_size": trainer.world, **trainer.metrics}, indent=2) + "\n")
    _barrier()
    return TrainResult(trainer.head, trainer.metrics, trainer.finished)


def corpus_baseline(head: ZenHead, data: TrainData) -> np.ndarray:
    """The profile's fixed BitDelta baseline: the mean of the head's outputs over every text the
    data holds (GSM8K questions and solutions, training sentences), (d_out,) float32."""
    rows = np.concatenate([data.corpus_train, data.corpus_held, data.s_train])
    return head.project(rows).mean(0, dtype=np.float64).astype(np.float32)


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _barrier() -> None:
    if _distributed():
        torch.distributed.barrier()


def init_distributed() -> bool:
    """Join the torchrun group when launched by torchrun (WORLD_SIZE > 1); gloo on CPU."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not _distributed():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return _distributed()


def _stderr(msg: str) -> None:
    print(f"[dso train] {msg}", file=sys.stderr, flush=True)


def _fmt(values: dict) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
