"""The default profile's encoder: MiniLM + the shipped Zen head -> 7680 dims.

The head's weights (float16, widened to float32 on load) and the profile's fixed BitDelta
baseline ship inside the package, so every machine encodes into the same space and nothing
trains on first use. `dso train --default --out DIR` reproduces them from packaged data by
`dsonet.train.config.cpu_recipe()` and reports how closely the reproduction agrees with the
shipped head on neighbours (other CPUs and BLAS builds give other floats, so never the same bits:
the encoder id, a digest of the weights, tells the two spaces apart).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from dsonet.encoders.base import EncoderError
from dsonet.encoders.zen import CONFIG_NAME, WEIGHTS_NAME, ZenReranker

DEFAULT_HEAD = "minilm-zen7680"  # the folder under dsonet/encoders/weights/


def default_head_dir() -> Path:
    """The shipped default head's directory (config.json, model.safetensors, baseline.safetensors)."""
    path = Path(str(resources.files("dsonet.encoders").joinpath("weights", DEFAULT_HEAD)))
    missing = [name for name in (CONFIG_NAME, WEIGHTS_NAME) if not (path / name).exists()]
    if missing:
        raise EncoderError(f"the default Zen head is missing from the package ({', '.join(missing)} not in {path}); "
                           f"reinstall dsonet, or rebuild it with `dso train --default --out DIR` and load "
                           f"ZenReranker.from_pretrained(DIR)")
    return path


@lru_cache(maxsize=1)
def zen_minilm() -> ZenReranker:
    """MiniLM + the shipped default Zen head, with the profile's baseline."""
    from dsonet.encoders.sentence import minilm

    return ZenReranker.from_pretrained(default_head_dir(), backbone=minilm())
