"""Any Hugging Face ``AutoModel`` as an encoder: mean or last-token pooling, optional query instruction.

This is how Qwen3-Embedding is used: last-token pooling, and queries prefixed with an
instruction such as ``"Instruct: Given a question, retrieve passages that answer it\\nQuery:"``
(documents get no prefix).
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Literal, Sequence

import numpy as np
from tqdm.auto import tqdm

from dsonet.encoders.base import EncoderError, Kind, check_texts, l2_normalise

Pooling = Literal["mean", "last"]
POOLINGS = ("mean", "last")


class HFEncoder:
    def __init__(self, name_or_path: str, pooling: Pooling = "mean", query_instruction: str = "",
                 device: str | None = None, batch_size: int = 32, max_length: int = 512,
                 dtype: str | None = None, show_progress: bool | None = None):
        if pooling not in POOLINGS:
            raise EncoderError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        # bf16 on a GPU is how 8B embedders are served; fp32 on CPU, where bf16 matmuls are slow
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if self.device.startswith("cuda") else torch.float32)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(name_or_path)
            self.model = AutoModel.from_pretrained(name_or_path, dtype=torch_dtype).to(self.device).eval()
        except Exception as exc:  # OSError, ValueError, hub errors: one message with the fix
            raise EncoderError(f"cannot load Hugging Face model {name_or_path!r}: {exc}; pass a local directory or go online") from exc
        self.name = str(name_or_path)
        self.pooling = pooling
        self.query_instruction = query_instruction
        self.batch_size = batch_size
        self.max_length = max_length
        self.show_progress = show_progress

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def id(self) -> str:
        tail = f":q{hashlib.sha256(self.query_instruction.encode()).hexdigest()[:8]}" if self.query_instruction else ""
        return f"hf:{self.name}:{self.pooling}{tail}"

    def config(self) -> dict:
        return {"type": "hf", "name_or_path": self.name, "pooling": self.pooling, "query_instruction": self.query_instruction}

    def encode(self, texts: Sequence[str], kind: Kind = "document") -> np.ndarray:
        import torch

        texts = check_texts(texts, kind)
        if kind == "query" and self.query_instruction:
            texts = [self.query_instruction + t for t in texts]
        progress = len(texts) > 1000 if self.show_progress is None else self.show_progress
        out = [np.zeros((0, self.dim), dtype=np.float32)]
        starts = range(0, len(texts), self.batch_size)
        for start in tqdm(starts, desc=f"encode {self.name}", disable=not progress, file=sys.stderr):
            batch = self.tokenizer(texts[start : start + self.batch_size], padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                hidden = self.model(**batch).last_hidden_state  # (B, T, H)
            out.append(pool(hidden, batch["attention_mask"], self.pooling).float().cpu().numpy())
        return l2_normalise(np.concatenate(out))


def pool(hidden, mask, pooling: Pooling):
    """(B, T, H) hidden states, (B, T) attention mask -> (B, H)."""
    if pooling == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1)
    # the last real token, whichever side the tokenizer pads on
    last = mask.shape[1] - 1 - mask.flip(1).int().argmax(1)  # (B,)
    return hidden[range(hidden.shape[0]), last]
