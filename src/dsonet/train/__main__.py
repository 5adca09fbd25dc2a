"""`torchrun --nproc_per_node=2 -m dsonet.train --out DIR [options]`: the `dso train` command per rank."""

from dsonet.cli.encoders import train_command

train_command(prog_name="python -m dsonet.train")
