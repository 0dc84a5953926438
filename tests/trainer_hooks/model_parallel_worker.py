"""A `faultlens run` worker that trains with Lightning's ModelParallelStrategy (CPU, gloo): a tiny
MLP split over --tp tensor-parallel ranks (torch's ColwiseParallel / RowwiseParallel on the
strategy's device mesh), the rest data parallel, with the FaultlensCallback from the environment
`faultlens run` sets, for tests/trainer_hooks/test_parallel_groups_broker.py. It trains --steps
steps from random weights (``from_scratch=True``) and ends."""

from __future__ import annotations

import argparse
import os

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import ModelParallelStrategy

from faultlens.trainer_hooks.lightning import FaultlensCallback
from tests.trainer_hooks.lightning_parts import FEATURES, data


class TensorParallelMLP(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(FEATURES, 16)
        self.down = torch.nn.Linear(16, 1)

    def configure_model(self):
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        parallelize_module(self, self.device_mesh["tensor_parallel"], {"up": ColwiseParallel(), "down": RowwiseParallel()})

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.down(torch.relu(self.up(x))), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    world = int(os.environ["WORLD_SIZE"])
    strategy = ModelParallelStrategy(data_parallel_size=world // args.tp, tensor_parallel_size=args.tp)
    trainer = pl.Trainer(accelerator="cpu", devices=int(os.environ["LOCAL_WORLD_SIZE"]), strategy=strategy,
                         max_steps=args.steps, default_root_dir=args.root, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[FaultlensCallback(from_scratch=True, exit_grace_s=30)])
    trainer.fit(TensorParallelMLP(), data())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
