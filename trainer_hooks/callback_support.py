"""What the Lightning and Hugging Face callbacks share: making their TrainerHook, counting a batch's
tokens, a step's gradient norm and loss, and choosing the checkpoint a restarted run resumes from.

No framework is imported here (trainer_hooks/lightning.py and trainer_hooks/hf.py do that); torch
only inside the functions that take tensors, so importing this module costs nothing.

A restart-type command (restart, rollback, reattempt, evict) ends the training process at a step
boundary with the code of trainer_hooks.exit_codes, as for a plain loop; the launcher (`faultlens
run`) starts the workers again with FAULTLENS_RESUME (``latest`` or ``rollback``) and, when the
command named one, FAULTLENS_CHECKPOINT. :func:`resume_choice` turns those into the checkpoint to
hand to the framework's own resume (``fit(ckpt_path=...)``, ``train(resume_from_checkpoint=...)``).
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections.abc import Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any, TypedDict

from faultlens.events.payloads_job import TrainEval, area_under_roc, correlation, determination
from faultlens.events.signing import VerifyKeys
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks.hook import TrainerHook

log = logging.getLogger(__name__)

JOB_ENV, NODE_ENV = "FAULTLENS_JOB", "FAULTLENS_NODE"
RESUME_ENV, CHECKPOINT_ENV, STATE_DIR_ENV = "FAULTLENS_RESUME", "FAULTLENS_CHECKPOINT", "FAULTLENS_STATE_DIR"
RESUME_WHY_ENV = "FAULTLENS_RESUME_WHY"


class HookIdentity(TypedDict):
    """Who a callback's hook speaks for: :func:`make_hook`'s keyword arguments, kept by the callback
    from its constructor until the framework's first hook (None: from `faultlens run`'s environment)."""

    job: str | None
    node: str | None
    settings: KafkaSettings | None
    keys: VerifyKeys | None
    state_dir: str | os.PathLike[str] | None


def make_hook(*, rank: int, job: str | None, node: str | None, settings: KafkaSettings | None,
              keys: VerifyKeys | None, state_dir: str | os.PathLike[str] | None,
              checkpoint_dir: str | os.PathLike[str], **hook_kwargs: Any) -> TrainerHook:
    """The hook of one rank, its identity from the arguments or the environment `faultlens run`
    sets (FAULTLENS_JOB, FAULTLENS_NODE, FAULTLENS_BOOTSTRAP, FAULTLENS_VERIFY_KEY); the commands it
    handled are remembered in ``state_dir``, else FAULTLENS_STATE_DIR, else the checkpoint folder
    (so a restarted run refuses a duplicate of a command it handled)."""
    job = job or os.environ.get(JOB_ENV)
    if not job:
        raise ValueError("FaultlensCallback needs the job's name: pass job=... or set FAULTLENS_JOB "
                         "(`faultlens run` sets it for every worker)")
    node = node or os.environ.get(NODE_ENV) or socket.gethostname()
    if settings is None:
        settings = KafkaSettings.load(overrides={"client_id": f"trainer-{job}-{rank}"})
    folder = Path(state_dir or os.environ.get(STATE_DIR_ENV) or checkpoint_dir)
    folder.mkdir(parents=True, exist_ok=True)
    return TrainerHook(job=job, rank=rank, node=node, settings=settings, keys=keys, state_dir=folder, **hook_kwargs)


def count_tokens(batch: Any) -> int | None:
    """Tokens in a batch: the ones its ``attention_mask`` keeps, else every ``input_ids`` entry; for
    a batch without those (a tensor, or a tuple whose first item is one), its first tensor's
    leading dimension (samples). None when nothing in it is countable."""
    if isinstance(batch, Mapping):
        mask, ids = batch.get("attention_mask"), batch.get("input_ids")
        if mask is not None and hasattr(mask, "sum"):
            return int(mask.sum())
        if ids is not None and hasattr(ids, "numel"):
            return int(ids.numel())
        batch = next(iter(batch.values()), None)
    if isinstance(batch, (list, tuple)) and batch:
        batch = batch[0]
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else None


def grad_norm(parameters: Any) -> float | None:
    """The L2 norm of all gradients together (None before any backward)."""
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return None
    return float(torch.nn.utils.get_total_norm(grads, norm_type=2.0))


def optimizer_lr(optimizer: Any) -> float | None:
    """The learning rate the optimizer holds now: its first parameter group's (None: no optimizer, or
    one without an ``lr``). Schedulers write it there, warm restarts included."""
    groups = getattr(optimizer, "param_groups", None)
    if not groups:
        return None
    lr = groups[0].get("lr") if isinstance(groups[0], Mapping) else None
    try:
        return float(lr) if lr is not None else None
    except (TypeError, ValueError):
        return None  # a tensor lr of more than one value, or something else: no learning rate to tell


def label_shares(labels: Any, classes: int | None) -> list[float] | None:
    """Each class's share of a training set's labels, integers in [0, ``classes``); None where any is
    not one (-100 is a padding label, a float a regression target, a list a multi-label row), there
    are none, or fewer than two classes."""
    if classes is None or classes < 2:
        return None
    counts: dict[int, int] = {}
    try:
        for label in labels:
            if isinstance(label, bool) or not isinstance(label, Integral) or not 0 <= int(label) < classes:
                return None
            counts[int(label)] = counts.get(int(label), 0) + 1
    except TypeError:
        return None  # not a sequence of labels
    total = sum(counts.values())
    return [n / total for n in counts.values()] if total else None


def eval_chance(metrics: Mapping[str, Any], classes: int | None, chance_loss: float | None,
                majority: float | None) -> dict[str, float]:
    """Each held-out metric's value for a model that ignores its input, for ``train``/``eval``
    (diagnosis/rules/loss_eval.py), by its name's direction: a loss's is ``chance_loss`` (the class
    prior's entropy), else ln(``classes``); an accuracy's the ``majority`` label's share, else
    1/``classes``; a correlation's (Spearman, Pearson) 0, class count or not: predictions that ignore
    the input do not vary with the target (a regressor predicting the mean); an ROC AUC's 0.5, class count or
    not, where it is a fraction; an R²'s 0, what predicting
    the target's mean scores (its name says higher is better: payloads_job.determination). Metrics of none of
    these kinds, or a loss or accuracy without a class count, get none."""
    out: dict[str, float] = {}
    for name in metrics:
        higher = TrainEval.direction(name)
        if higher is True and (correlation(name) or determination(name)):
            out[name] = 0.0
        elif higher is True and area_under_roc(name):
            # A coin's 0.5, where the value is a fraction (an AUC printed in per cent, 48.7, is not read against it).
            if isinstance(metrics[name], (int, float)) and 0 <= metrics[name] <= 1:
                out[name] = 0.5
        elif higher is False and (chance_loss is not None or (classes or 0) >= 2):
            out[name] = chance_loss if chance_loss is not None else math.log(classes or 1)
        elif higher is True and (majority is not None or (classes or 0) >= 2):
            out[name] = majority if majority is not None else 1 / (classes or 1)
    return out


def label_prior_loss(labels: Any, classes: int | None) -> float | None:
    """The loss of a classifier that answers every input with its training labels' distribution: that
    distribution's entropy, in nats (a class prior), for the stalled-loss diagnosis (``chance_loss``). A
    model stuck there learned which labels are common and nothing of the input: a loss below ln(classes)
    when the labels are uneven (issue 54: an LSTM on TIMIT frames at 9 % below ln 1947). ``labels``: the
    training set's labels, integers in [0, ``classes``); None where any is not one (-100 is a padding
    label, a float a regression target, a list a multi-label row) or there are none."""
    return shares_entropy(label_shares(labels, classes))


def shares_entropy(shares: Sequence[float] | None) -> float | None:
    """The entropy, in nats, of a distribution given by its shares (None: no distribution)."""
    return -sum(p * math.log(p) for p in shares if p > 0) if shares else None


def step_loss(micro_losses: Sequence[float], shares: bool) -> float | None:
    """One optimizer step's loss from its micro-batches' losses: their sum when each is already a
    share of the step's loss (divided by the accumulation count or the step's token count, as
    Lightning's automatic optimization and the HF Trainer's loss kwargs do), else their mean."""
    if not micro_losses:
        return None
    total = float(sum(micro_losses))
    return total if shares else total / len(micro_losses)


def resume_choice(ordered: Sequence[str], resume: str, named: str | None) -> str | None:
    """The checkpoint to resume from, given the run's checkpoints oldest first: the one a command
    named; for ``rollback`` the one before the newest; else the newest. None: start afresh. The
    launcher sets ``rollback`` only for a fault that may have poisoned the newest (NaN, spike,
    regressed loss) or a rollback that names none; a user_code crash's rollback resumes ``latest``."""
    if named:
        return named
    if resume == "rollback":
        return ordered[-2] if len(ordered) >= 2 else None
    return ordered[-1] if ordered else None


def resume_from_environment(ordered: Sequence[str], environ: Mapping[str, str] | None = None) -> str | None:
    """:func:`resume_choice` with what `faultlens run` set for this start of the workers."""
    env = os.environ if environ is None else environ
    chosen = resume_choice(ordered, env.get(RESUME_ENV, "latest") or "latest", env.get(CHECKPOINT_ENV) or None)
    if chosen is not None:
        # Which and why, as the launcher decided it (trainer_hooks.elastic_commands.resume_choice).
        log.warning("faultlens: resuming from %s (%s=%s: %s)", chosen, RESUME_ENV, env.get(RESUME_ENV, "latest"),
                    env.get(RESUME_WHY_ENV) or "the newest checkpoint")
    return chosen
