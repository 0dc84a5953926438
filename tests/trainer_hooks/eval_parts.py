"""The framework side of tests/trainer_hooks/test_eval_events.py: a tiny two-class classifier on labels
that carry no signal (a model that can only guess), for Lightning with a validation loop and for the
Hugging Face Trainer with an eval set. A module of its own so that the frameworks are imported by the
fixtures of the tests that train, not by every xdist worker that collects the file (issue 47)."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
import transformers

from faultlens.trainer_hooks.hf import FaultlensCallback as HfCallback  # noqa: F401 (the tests make it here)
from faultlens.trainer_hooks.lightning import FaultlensCallback as LightningCallback  # noqa: F401

FEATURES, BATCH, SAMPLES, SEQ, VOCAB = 6, 8, 32, 8, 50


def noise_labels(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(samples, FEATURES, generator=g), torch.randint(0, 2, (samples,), generator=g)


def loader(seed: int) -> torch.utils.data.DataLoader:
    x, y = noise_labels(SAMPLES, seed)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)


class Guesser(pl.LightningModule):
    """A linear two-class head; it records what it logs at each validation's end."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(FEATURES, 2)
        self.validated: list[dict[str, float]] = []
        self._outputs: list[tuple[float, float]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.layer(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean()
        self.log("val_loss", loss)
        self.log("val_acc", acc)
        self._outputs.append((loss.item(), acc.item()))

    def on_validation_epoch_end(self):
        losses, accs = zip(*self._outputs, strict=True)
        self._outputs.clear()
        if not self.trainer.sanity_checking:
            self.validated.append({"val_loss": sum(losses) / len(losses), "val_acc": sum(accs) / len(accs)})

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def lightning_trainer(tmp_path, faultlens, epochs: int) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        default_root_dir=tmp_path,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=2,
        callbacks=[faultlens],
    )


class Sentences(torch.utils.data.Dataset):
    """Random token sequences with random binary labels: nothing to learn."""

    def __init__(self, seed: int, count: int = SAMPLES):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, VOCAB, (count, SEQ), generator=g)
        self.labels = torch.randint(0, 2, (count,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long), "labels": self.labels[i]}


def accuracy(prediction: transformers.EvalPrediction) -> dict[str, float]:
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def hf_trainer(tmp_path, faultlens, steps: int, every: int) -> transformers.Trainer:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        max_position_embeddings=SEQ,
        num_labels=2,
    )
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH,
        eval_strategy="steps",
        eval_steps=every,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    return transformers.Trainer(
        model=transformers.BertForSequenceClassification(config),
        args=args,
        train_dataset=Sentences(0),
        eval_dataset=Sentences(1),
        compute_metrics=accuracy,
        callbacks=[faultlens],
    )
