"""Where a loss curve was first seen from (diagnosis/rules/loss_stalled.py): its start watched or not, an untrained
model's or a trained one's, and whether its training loss has fitted its data since. "Never learned", "learned a
little, then stopped" and the held-out readings are measured from an untrained start only: a resumed run or a
fine-tune starts at a trained model's loss, flat and far below chance (issue 54: first seen at step 30,000, flat at
2.0), and a run whose start nothing tells is not called one that never learned."""

from __future__ import annotations

import math
import statistics

from faultlens.diagnosis.rules.loss_curve import LossCurve
from faultlens.diagnosis.rules.loss_eval import FITTED

# A first loss at least this share of ln(classes) is an untrained model's: a random init starts at a
# guess's loss; one a tenth of a guess below it has learned (the tenth a spike and a divergence are
# measured in), as a fine-tune resumed at 3.66 against ln 61 = 4.11 has (issue 54, fresh batch 4).
UNTRAINED = 0.9
LATEST = 10  # the latest losses whose median says the training loss fitted: one batch's spike does not move it


def trained_start(curve: LossCurve) -> bool:
    """Whether the run's first loss is a trained model's by the class count: under 9/10 of a guess's
    (UNTRAINED), the trainer not saying its weights began random. (A pretrained body under a new head starts
    at a guess's loss, and a trainer's "resumed" with no class count says nothing of where its loss began:
    fresh batch 13's latent MAE, resumed from a ViT-MAE and stuck 10 % below its first loss, is stalled.)"""
    return (curve.from_scratch is not True and curve.classes is not None and curve.first is not None
            and curve.first < UNTRAINED * math.log(curve.classes))


def fitted(curve: LossCurve) -> bool:
    """Whether the training loss has fitted its batches: the median of its latest ten losses (one batch's
    spike does not move it) under loss_eval.FITTED of a guess's, ln(classes). False where the class count is
    unsaid."""
    if curve.classes is None or not curve.losses:
        return False
    latest = [v for _, v in list(curve.losses)[-LATEST:]]
    return statistics.median(latest) < FITTED * math.log(curve.classes)


def from_start(curve: LossCurve, size: int) -> bool:
    """Whether the curve was first seen within its first window of ``size`` steps, not of events: a trainer
    that logs every 50th step is first seen at step 49 (Lightning's CSV logger; issue 54, fresh
    batch 6), an HF Trainer at its logging_steps, and is watched from its start all the same. (So is
    a resumed run whose hook counts its steps from 1 again: what it says is where the run began.)"""
    return curve.first_step is not None and curve.first_step < size * curve.stride()


def untrained(curve: LossCurve, size: int) -> bool:
    """Whether the curve's first loss is an untrained model's, the start "never learned" is
    measured from. A curve first seen mid-run (the pipeline started or restarted late, the job
    resumed from a checkpoint) starts at a trained model's loss; so does a fine-tune, or a resumed
    run whose hook counts its steps from 1 again: a converged run would read as one that never
    learned. The trainer's word decides; without it, a first loss near a guess's, ln(classes)."""
    if curve.first is None or not from_start(curve, size):
        return False
    if curve.from_scratch is not None:
        return curve.from_scratch
    return curve.classes is not None and curve.first >= UNTRAINED * math.log(curve.classes)


def untrained_head(curve: LossCurve, size: int) -> bool:
    """Whether "never learned" is measured from the curve's first loss: watched from an untrained model
    (:func:`untrained`), or from a trained body under a new head, where the trainer says the run resumed (a frozen
    pretrained base, its features extracted) but the first loss sits at a guess's, at least 9/10 of ln(classes): the
    head that trains starts untrained, and the run is healthy only if it learns (issue 54's fresh batch 46, an
    EfficientNetB7 base under a new 10-way head at ln 10; the lead's settlement, loss round 47). Not for the other
    readings of an untrained start: a held-out share unchanged from its first evaluation is a new head's warm-up too."""
    if untrained(curve, size):
        return True
    return (curve.from_scratch is False and curve.first is not None and from_start(curve, size)
            and curve.classes is not None and curve.first >= UNTRAINED * math.log(curve.classes))
