"""A `faultlens run` worker that trains with Lightning (DDP on gloo, CPU) and the FaultlensCallback,
for tests/trainer_hooks/test_lightning_faultlens_run.py: everything faultlens-specific comes from
the environment `faultlens run` sets, as in a user's job.

Prints one JSON line as it starts ({"worker": "started", "rank", "attempt", "resumed"}).
"""

from __future__ import annotations

import argparse
import os
import time

import lightning.pytorch as pl

from faultlens.trainer_hooks.lightning import FaultlensCallback
from tests.trainer_hooks.lightning_parts import TinyRegression, data
from tests.trainer_hooks.worker_line import say


class Pace(pl.Callback):
    """A few steps a second, as a real job's, so the broker is not flooded while the test acts."""

    def __init__(self, step_s: float):
        self.step_s = step_s

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        time.sleep(self.step_s)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--step-s", type=float, default=0.05)
    args = p.parse_args()
    faultlens = FaultlensCallback(exit_grace_s=30)
    trainer = pl.Trainer(accelerator="cpu", devices=int(os.environ["LOCAL_WORLD_SIZE"]), strategy="ddp",
                         max_steps=1_000_000, default_root_dir=args.root, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[Pace(args.step_s), faultlens])
    resume = faultlens.resume_checkpoint(trainer)
    say({"worker": "started", "rank": int(os.environ["RANK"]),
         "attempt": int(os.environ["FAULTLENS_ATTEMPT"]), "resumed": resume})
    trainer.fit(TinyRegression(), data(), ckpt_path=resume)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
