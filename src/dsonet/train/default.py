"""The default profile's head: build it by the CPU recipe, and check a rebuild against the shipped one.

    build_default(out_dir)   # train cpu_recipe() on MiniLM; write the head as the package ships it
    reproduce(out_dir)       # the same, then compare with the shipped head: `dso train --default`

Another CPU, thread count or BLAS build gives other floats, so a rebuild is never the shipped
head bit for bit (and its encoder id, a digest of the weights, differs). What must agree is
the space: `neighbour_agreement` measures the top-10 neighbours of held-out texts in both.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import numpy as np

from dsonet.data import gsm8k, sentences
from dsonet.encoders import default_encoder
from dsonet.encoders.cache import cached_encode
from dsonet.encoders.sentence import minilm
from dsonet.encoders.zen import ZenReranker
from dsonet.train.config import cpu_recipe
from dsonet.train.data import TrainData, split_indices
from dsonet.train.run import DATA, corpus_baseline, train

RUN = "run"  # out_dir/run: the training run's checkpoint, data and full-precision head


def build_default(out_dir: str | Path, log: Callable[[str], None] | None = None) -> ZenReranker:
    """Train the default head (`cpu_recipe()`, MiniLM) in ``out_dir``/run, then `package_head` it into ``out_dir``."""
    out = Path(out_dir)
    result = train(cpu_recipe(), out / RUN, encoder=minilm(), log=log)
    if not result.finished:
        raise RuntimeError(f"training in {out / RUN} did not finish")
    return package_head(out / RUN, out)


def package_head(run_dir: str | Path, out_dir: str | Path) -> ZenReranker:
    """Write a finished run's head into ``out_dir`` as the package ships it: config.json,
    model.safetensors (float16: `dso bench train` measures that it keeps the neighbours),
    baseline.safetensors (the mean of the float16 head's outputs over the training corpus) and
    metrics.json."""
    run, out = Path(run_dir), Path(out_dir)
    ZenReranker.from_pretrained(run, backbone=minilm()).save_pretrained(out, half=True)
    half = ZenReranker.from_pretrained(out, backbone=minilm())  # the rounded weights the package holds
    baseline = corpus_baseline(half.head, TrainData.load(run / DATA))
    ZenReranker(minilm(), half.head, baseline).save_pretrained(out, half=True)
    shutil.copy2(run / "metrics.json", out / "metrics.json")
    return ZenReranker.from_pretrained(out, backbone=minilm())


def held_out_texts() -> list[str]:
    """The texts of the GSM8K items the default recipe holds out: questions, solutions, sentences."""
    config = cpu_recipe()
    items = gsm8k()
    _, held = split_indices(len(items), config.held_out, config.seed)
    return list(dict.fromkeys(t for i in held for t in [items[i].question, items[i].solution, *items[i].steps,
                                                         *sentences(items[i].question)]))


def neighbour_agreement(a: ZenReranker, b: ZenReranker, texts: list[str], k: int = 10) -> float:
    """Mean |top-k of text i by a ∩ top-k by b| / k over the texts, each searching all the others."""
    def neighbours(encoder: ZenReranker) -> np.ndarray:
        e = cached_encode(encoder, texts, "document")  # (N, d): the backbone's vectors cached once
        scores = e @ e.T
        np.fill_diagonal(scores, -np.inf)
        return np.argpartition(-scores, k, axis=1)[:, :k]

    na, nb = neighbours(a), neighbours(b)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(na.tolist(), nb.tolist())]))


def reproduce(out_dir: str | Path, log: Callable[[str], None] | None = None) -> dict:
    """`build_default`, then how the rebuild agrees with the head the package ships."""
    rebuilt, shipped = build_default(out_dir, log), default_encoder()
    base_a, base_b = rebuilt.baseline, shipped.baseline
    return {"out": str(out_dir), "rebuilt_id": rebuilt.id, "shipped_id": shipped.id,
            "top10_overlap": neighbour_agreement(rebuilt, shipped, held_out_texts()),
            "baseline_cosine": float(base_a @ base_b / (np.linalg.norm(base_a) * np.linalg.norm(base_b)))}
