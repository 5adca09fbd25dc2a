import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dsonet.train.config import TrainConfig
from dsonet.train.data import build_data

WORKER = Path(__file__).with_name("ddp_worker.py")


@pytest.mark.slow
def test_two_process_training_finishes_with_identical_weights_on_both_ranks(tmp_path, minilm):
    build_data(TrainConfig(limit_items=60), encoder=minilm).save(tmp_path / "data.npz")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    assert all(r["finished"] for r in ranks)
    for name, weight in ranks[0]["head"].items():
        assert torch.equal(weight, ranks[1]["head"][name]), name
    assert (tmp_path / "model.safetensors").exists() and (tmp_path / "metrics.json").exists()
