"""Training the Zen projection head in three stages (seeds/002); single process or torchrun.

Sits beside `dsonet.encoders` (it trains an encoder's head and imports nothing above it).
"""

from dsonet.train.config import TrainConfig, cpu_recipe
from dsonet.train.run import TrainError, train

__all__ = ["TrainConfig", "TrainError", "cpu_recipe", "train"]
