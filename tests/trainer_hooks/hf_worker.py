"""A `faultlens run` worker that trains a tiny GPT-2 with the Hugging Face Trainer (DDP on gloo, CPU)
and the FaultlensCallback, for tests/trainer_hooks/test_hf_trainer_faultlens_run.py: everything
faultlens-specific comes from the environment `faultlens run` sets, as in a user's job.

Prints one JSON line as it starts ({"worker": "started", "rank", "attempt", "resumed"}).
"""

from __future__ import annotations

import argparse
import os
import time

import transformers

from faultlens.trainer_hooks.hf import FaultlensCallback
from tests.trainer_hooks.hf_parts import BATCH, Sequences, tiny_gpt2
from tests.trainer_hooks.worker_line import say


class Pace(transformers.TrainerCallback):
    """A few steps a second, as a real job's, so the broker is not flooded while the test acts."""

    def __init__(self, step_s: float):
        self.step_s = step_s

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.step_s)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--step-s", type=float, default=0.05)
    args = p.parse_args()
    faultlens = FaultlensCallback(exit_grace_s=30)
    training = transformers.TrainingArguments(
        output_dir=args.root, max_steps=1_000_000, per_device_train_batch_size=BATCH, learning_rate=5e-3,
        save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0,
        logging_strategy="no")
    trainer = transformers.Trainer(model=tiny_gpt2(), args=training, train_dataset=Sequences(),
                                   callbacks=[Pace(args.step_s), faultlens])
    resume = faultlens.resume_checkpoint(training)
    say({"worker": "started", "rank": int(os.environ["RANK"]),
         "attempt": int(os.environ["FAULTLENS_ATTEMPT"]), "resumed": resume})
    trainer.train(resume_from_checkpoint=resume)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
