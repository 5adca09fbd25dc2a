"""Training the Zen projection head in three stages (seeds/002); single process or torchrun.

Sits beside `dsonet.encoders` (it trains an encoder's head and imports nothing above it).
"""

from dsonet.train.config import TrainConfig, cpu_recipe

__all__ = ["TrainConfig", "TrainError", "cpu_recipe", "train"]


def __getattr__(name: str):
    """`train` and `TrainError` load torch, so only when asked for: `dso train --help` and the
    core (which has no torch) import the config alone."""
    if name in ("TrainError", "train"):
        from dsonet.train import run

        return getattr(run, name)
    raise AttributeError(f"module 'dsonet.train' has no attribute {name!r}")
