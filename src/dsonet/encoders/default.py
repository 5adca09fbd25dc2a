"""The default profile's encoder: MiniLM + the shipped Zen head -> 7680 dims.

The head's weights (float16, widened to float32 on load) and the profile's fixed BitDelta
baseline ship inside the package, so every machine encodes into the same space and nothing
trains on first use. `dso train --default --out DIR` reproduces them from packaged data by
`dsonet.train.config.cpu_recipe()` and reports how closely the reproduction agrees with the
shipped head on neighbours (other CPUs and BLAS builds give other floats, so never the same bits:
the encoder id, a digest of the weights, tells the two spaces apart).

Two paths compute it, with one id, baseline and support: numpy (`zen_minilm_numpy`, the default:
no torch, MiniLM's weights shipped as float16) and torch (`zen_minilm`, sentence-transformers
and the `encoder` extra; what training builds on). Their vectors agree to cosine ≥ 0.9999
(`tests/encoders/test_numpy_encoder.py`). ``DSONET_ENCODER_BACKEND=torch`` picks the torch path
for `default_zen`, to compare the two (`dso bench coldstart`).
"""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from dsonet.encoders.base import Encoder, EncoderError
from dsonet.encoders.minilm_numpy import numpy_minilm
from dsonet.encoders.sentence import minilm
from dsonet.encoders.zen_numpy import NumpyZen

if TYPE_CHECKING:  # the torch path: imported only when it is asked for
    from dsonet.encoders.zen import ZenReranker

DEFAULT_HEAD = "minilm-zen7680"  # the folder under dsonet/encoders/weights/
HEAD_FILES = ("config.json", "model.safetensors")  # zen.CONFIG_NAME, zen.WEIGHTS_NAME (zen.py imports torch)
BACKEND_ENV = "DSONET_ENCODER_BACKEND"
BACKENDS = ("numpy", "torch")


def default_head_dir() -> Path:
    """The shipped default head's directory (config.json, model.safetensors, baseline.safetensors)."""
    path = Path(str(resources.files("dsonet.encoders").joinpath("weights", DEFAULT_HEAD)))
    missing = [name for name in HEAD_FILES if not (path / name).exists()]
    if missing:
        raise EncoderError(f"the default Zen head is missing from the package ({', '.join(missing)} not in {path}); "
                           f"reinstall dsonet, or rebuild it with `dso train --default --out DIR` and load "
                           f"ZenReranker.from_pretrained(DIR)")
    return path


def default_zen() -> Encoder:
    """The default profile's encoder on the path ``$DSONET_ENCODER_BACKEND`` names (numpy unless it says torch)."""
    backend = os.environ.get(BACKEND_ENV, "numpy") or "numpy"
    if backend not in BACKENDS:
        raise EncoderError(f"{BACKEND_ENV}={backend!r} is not a backend; use one of {', '.join(BACKENDS)} (or unset it)")
    return zen_minilm() if backend == "torch" else zen_minilm_numpy()


@lru_cache(maxsize=1)
def zen_minilm_numpy() -> NumpyZen:
    """MiniLM + the shipped default Zen head in numpy, with the profile's baseline: no torch."""
    return NumpyZen.from_pretrained(default_head_dir(), backbone=numpy_minilm())


@lru_cache(maxsize=1)
def zen_minilm() -> ZenReranker:
    """MiniLM + the shipped default Zen head on torch (sentence-transformers), with the profile's baseline."""
    from dsonet.encoders.zen import ZenReranker  # torch

    return ZenReranker.from_pretrained(default_head_dir(), backbone=minilm())
