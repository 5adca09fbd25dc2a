"""`torchrun --nproc_per_node=2 -m dsonet.train --out DIR [--s1-steps N ...]`: one rank of a training run.

The same options as `dso train` (one per scalar `TrainConfig` field), parsed here with argparse
so that the training layer never imports the CLI above it.
"""

import argparse
import dataclasses
import json
import sys

from dsonet.train.config import TrainConfig, cpu_recipe
from dsonet.train.run import TrainError, init_distributed, train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dsonet.train", description=__doc__)
    parser.add_argument("--out", default="zen-head", help="directory for checkpoints and the trained head")
    parser.add_argument("--backbone", default="minilm", help="frozen backbone spec (minilm, st:NAME, hf:NAME)")
    parser.add_argument("--paper", action="store_true", help="the paper's hyper-parameters instead of the CPU recipe")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many steps; run again to resume")
    for f in dataclasses.fields(TrainConfig):
        if isinstance(f.default, (int, float, str)) and f.name != "backbone":
            parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=type(f.default), default=None,
                                help=f"override {f.name} (paper/default: {f.default})")
    args = vars(parser.parse_args(argv))
    out, paper, max_steps = args.pop("out"), args.pop("paper"), args.pop("max_steps")
    config = (TrainConfig() if paper else cpu_recipe()).with_overrides(**args)
    init_distributed()
    try:
        result = train(config, out, max_steps=max_steps)
    except TrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result.finished:
        print(json.dumps(result.metrics, indent=1), file=sys.stderr)
    return 0


sys.exit(main())
