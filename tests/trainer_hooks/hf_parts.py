"""The Hugging Face side of tests/trainer_hooks/test_hf_trainer_callback.py: synthetic sequences, a tiny
GPT-2 built from a config, the command-sending callback and the Trainer. A module of its own so that
transformers and torch are imported by the fixture of the tests that train, not by every xdist worker
that collects the file (issue 47)."""

from __future__ import annotations

import torch
import transformers

from faultlens.trainer_hooks.hf import FaultlensCallback, checkpoint_folders  # noqa: F401 (the tests read it here)
from tests.trainer_hooks.callback_script import KEY, Script

VOCAB, SEQ, BATCH, ACCUMULATE = 64, 16, 4, 2


class Sequences(torch.utils.data.Dataset):
    """Synthetic token sequences (a repeating pattern a model can learn), labels = inputs."""

    def __init__(self, count: int = 512):
        g = torch.Generator().manual_seed(0)
        starts = torch.randint(0, VOCAB, (count, 1), generator=g)
        self.ids = (starts + torch.arange(SEQ)) % VOCAB

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long), "labels": self.ids[i]}


def tiny_gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config)


class Commands(transformers.TrainerCallback):
    """Sends the script's command for a step as that step begins (tests/trainer_hooks/callback_script.py)."""

    def __init__(self, script: Script):
        self.script = script

    def on_step_begin(self, args, state, control, **kwargs):
        self.script.before_step(state.global_step + 1)


def trainer_for(tmp_path, faultlens, script, max_steps, model=None):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=max_steps, per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUMULATE, learning_rate=5e-3, logging_steps=1, save_strategy="no",
        report_to="none", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0)
    return transformers.Trainer(model=model or tiny_gpt2(), args=args, train_dataset=Sequences(),
                                callbacks=[Commands(script), faultlens])


def callback(kafka_settings, job, tmp_path, **kwargs):
    return FaultlensCallback(job=job, node="n001", settings=kafka_settings, keys=KEY.verify_keys(),
                             state_dir=tmp_path / "state", exit_grace_s=120, **kwargs)
