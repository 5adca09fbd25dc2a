"""The default profile's encoder: MiniLM + a Zen head -> 7680 dims.

The repository ships no weights: the head is trained from packaged data by `cpu_recipe()`
(deterministic from its seed, a few minutes on 2 cores) on first use, then cached under
``cache_dir()/heads``. A file lock makes concurrent first uses train it once; an interrupted
training resumes from its checkpoint.
"""

from __future__ import annotations

import fcntl
import shutil
import sys
from functools import lru_cache
from pathlib import Path

from dsonet.encoders.cache import cache_dir
from dsonet.encoders.zen import CONFIG_NAME, WEIGHTS_NAME, ZenReranker


def default_head_dir() -> Path:
    from dsonet.train.config import cpu_recipe

    return cache_dir() / "heads" / f"minilm-zen7680-{cpu_recipe().recipe_hash()}"


def ensure_default_head() -> Path:
    """The cached default head's directory, training it first if it is missing."""
    path = default_head_dir()
    if (path / WEIGHTS_NAME).exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be training it right now: wait for it
        if not (path / WEIGHTS_NAME).exists():
            _train_into(path)
    return path


def _train_into(path: Path) -> None:
    from dsonet.encoders.sentence import minilm
    from dsonet.train import cpu_recipe, train

    print(f"[dsonet] training the default Zen head (MiniLM -> 7680 dims) once, into {path}; "
          f"this takes a few minutes on a CPU and is cached afterwards", file=sys.stderr, flush=True)
    work = path.with_name(path.name + ".work")
    train(cpu_recipe(), work, encoder=minilm())
    staged = path.with_name(path.name + ".staged")
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    for name in (CONFIG_NAME, WEIGHTS_NAME, "metrics.json"):
        shutil.copy2(work / name, staged / name)
    staged.replace(path)  # atomic: readers see either no head or a whole one
    shutil.rmtree(work, ignore_errors=True)


@lru_cache(maxsize=1)
def zen_minilm() -> ZenReranker:
    """MiniLM + the default Zen head (trained and cached on first use)."""
    from dsonet.encoders.sentence import minilm

    return ZenReranker.from_pretrained(ensure_default_head(), backbone=minilm())
