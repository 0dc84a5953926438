"""The Lightning side of tests/trainer_hooks/test_lightning_callback.py: a tiny model, its data, the
command-sending callback and the Trainer. A module of its own so that Lightning and torch are imported
by the fixture of the tests that train, not by every xdist worker that collects the file (issue 47)."""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from faultlens.trainer_hooks.lightning import FaultlensCallback
from tests.trainer_hooks.callback_script import KEY, Script

BATCH, FEATURES = 8, 6


class TinyRegression(pl.LightningModule):
    """y = x·w on synthetic data; it records the loss of every step it trains."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(FEATURES, 1)
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def data(samples: int = 64 * BATCH) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, FEATURES, generator=g)
    y = x @ torch.arange(1.0, FEATURES + 1).unsqueeze(1)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)


def loss_of(checkpoint) -> float:
    """The loss of the first batch under the weights a checkpoint holds."""
    model = TinyRegression()
    model.load_state_dict(torch.load(checkpoint, weights_only=False)["state_dict"])
    with torch.no_grad():
        return model.training_step(next(iter(data())), 0).item()


class Commands(pl.Callback):
    """Sends the script's command for a step as that step begins (tests/trainer_hooks/callback_script.py)."""

    def __init__(self, script: Script):
        self.script = script

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.script.before_step(trainer.global_step + 1)


def trainer_for(tmp_path, faultlens, script, max_steps, accumulate=1):
    return pl.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, default_root_dir=tmp_path, logger=False,
                      accumulate_grad_batches=accumulate,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[Commands(script), faultlens])


def callback(kafka_settings, job, tmp_path, **kwargs):
    return FaultlensCallback(job=job, node="n001", settings=kafka_settings, keys=KEY.verify_keys(),
                             state_dir=tmp_path / "state", exit_grace_s=120, **kwargs)
