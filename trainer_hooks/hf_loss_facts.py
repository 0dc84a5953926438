"""What the Hugging Face callback (trainer_hooks/hf.py) tells the loss detectors about a run's loss: how many
classes it is over, the loss of answering at chance, whether the weights began random. Read from the model, its
training table, the run's arguments and the Trainer's logs; pure functions, no transformers import (a TRL config is
known by its class name, so nothing here needs TRL installed)."""

from __future__ import annotations

import math
from typing import Any

from faultlens.trainer_hooks.callback_support import label_shares, shares_entropy


def loss_classes(model: Any) -> int | None:
    """How many classes a Hugging Face model's training loss is over, for the stalled-loss diagnosis
    (ln of it is a uniform guess's loss): a single-label classification head's labels, else a model's
    vocabulary (a language-model head's). None for a regression or multi-label head (its loss is no
    cross-entropy over ``num_labels``), a multiple-choice head (its choices are the batch's) or a model
    without a config. Read at each step: the model sets ``problem_type`` at its first forward."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    name = type(model).__name__
    if name.endswith("ForMultipleChoice"):
        return None
    if "Classification" in name:
        labels = getattr(config, "num_labels", None)
        single = getattr(config, "problem_type", None) in (None, "single_label_classification")
        return labels if single and isinstance(labels, int) and labels >= 2 else None
    return getattr(config, "vocab_size", None)


def table_columns(dataloader: Any) -> tuple[str, ...] | None:
    """The columns of the Hugging Face ``datasets`` table a dataloader reads, None for any other dataset (an
    iterable table's may be unknown too)."""
    columns = getattr(getattr(dataloader, "dataset", None), "column_names", None)
    return tuple(columns) if columns is not None else None


def train_label_shares(model: Any, dataloader: Any) -> list[float] | None:
    """A single-label classification head's training labels, each class's share
    (:func:`callback_support.label_shares`), read from a Hugging Face ``datasets`` table's ``labels`` or
    ``label`` column (the Trainer keeps it). None for any other head (a language model's tokens are no
    table column), or a dataset that is not such a table (reading a torch Dataset's items would load
    every sample)."""
    if "Classification" not in type(model).__name__:
        return None
    name = next((c for c in ("labels", "label") if c in (table_columns(dataloader) or ())), None)
    return label_shares(dataloader.dataset[name], loss_classes(model)) if name is not None else None


def train_label_prior(model: Any, dataloader: Any) -> float | None:
    """``chance_loss`` for a single-label classification head: its training set's class prior's entropy
    (:func:`train_label_shares`); None where those are not read."""
    return shares_entropy(train_label_shares(model, dataloader))


def _config_named(args: Any, name: str) -> bool:
    return name in {c.__name__ for c in type(args).__mro__}


def preference_chance(args: Any, logs: dict[str, Any], columns: tuple[str, ...] | None = None) -> float | None:
    """``chance_loss`` of a TRL preference run whose loss is -log sigmoid of a margin, ln 2 where the margin is zero:
    :func:`dpo_chance` or :func:`reward_chance` (``columns``: the training table's, :func:`table_columns`)."""
    dpo = dpo_chance(args, logs)
    return dpo if dpo is not None else reward_chance(args, logs, columns)


def dpo_chance(args: Any, logs: dict[str, Any]) -> float | None:
    """``chance_loss`` of a TRL DPO run: ln 2 (times its weight) for DPO's sigmoid loss alone, -log sigmoid(beta *
    margin), ln 2 at a zero reward margin (a policy that tells the chosen answer from the rejected no better than its
    reference). DPO: logs with ``rewards/margins`` and a ``DPOConfig`` (KTO, BCO, CPO, ORPO, online DPO log margins
    too, with other losses). None for another ``loss_type`` or several, RPO's ``rpo_alpha``, WPO weighting, or a
    logged router or NLL loss added (trl/trainer/dpo_trainer.py's loss; DPOConfig's docs)."""
    if "rewards/margins" not in logs or not _config_named(args, "DPOConfig"):
        return None
    kinds = getattr(args, "loss_type", "sigmoid")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or ())
    weights = list(getattr(args, "loss_weights", None) or [1.0])
    added = getattr(args, "rpo_alpha", None) is not None or getattr(args, "use_weighting", False)
    if kinds != ["sigmoid"] or len(weights) != 1 or added or "aux_loss" in logs or "nll_loss" in logs:
        return None
    return float(weights[0]) * math.log(2)


def reward_chance(args: Any, logs: dict[str, Any], columns: tuple[str, ...] | None) -> float | None:
    """``chance_loss`` of a TRL reward model's run (``RewardTrainer``, its arguments a ``RewardConfig``): its
    pairwise loss -log sigmoid(r_chosen - r_rejected) is ln 2 where the model scores both answers alike, a reward
    model that tells them apart no better than a coin. None where the training table has a ``margin`` column (the
    loss is then -log sigmoid(r_c - r_r - margin), whose chance is the margins'), where its columns are not known
    (the margin may be there), or with ``center_rewards_coefficient`` (a term on the rewards' size is added; TRL's
    trl/trainer/reward_trainer.py compute_loss)."""
    if "loss" not in logs or not _config_named(args, "RewardConfig") or columns is None or "margin" in columns:
        return None
    if getattr(args, "center_rewards_coefficient", None) is not None:
        return None
    return math.log(2)


def began_from_scratch(model: Any, said: bool | None) -> bool | None:
    """The trainer's word on the run's start, where the user gave none: True for a Hugging Face model
    built from a config (its ``name_or_path`` empty), whose weights are random; None for one loaded by
    ``from_pretrained`` (it carries the name or path it came from, random head or not) or any other
    module, which nothing here tells apart from a trained one. (A model built from a config and then
    given trained weights by hand needs ``from_scratch=False``.)"""
    if said is not None:
        return said
    return True if getattr(model, "name_or_path", None) == "" else None
