"""Run under torchrun by test_distributed: a tiny training, then each rank saves its weights."""

import sys

import torch

from dsonet.train import TrainConfig, train
from dsonet.train.run import init_distributed

out = sys.argv[1]
init_distributed()
config = TrainConfig(limit_items=60, s1_steps=6, s1_batch=16, s1_warmup=2, s2_steps=4, s2_batch=8, s2_lr=1e-4,
                     s2_mine_every=2, s3_steps=3, s3_batch=8, s3_lr=1e-4, s3_copies=3, s3_code_queries=4, s3_code_pool=16,
                     checkpoint_every=4)
result = train(config, out)  # data.npz is already in `out`: the backbone is never loaded
rank = torch.distributed.get_rank()
torch.save({"finished": result.finished, "head": result.head.state_dict()}, f"{out}/rank{rank}.pt")
