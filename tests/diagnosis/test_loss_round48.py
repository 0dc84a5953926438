"""Loss round 48 (issue 54, fresh batch 47 opened): a held-out accuracy unchanged from its first evaluation waits while
the held-out loss and the training loss beside it both still fall.

A share of the held-out set the same to every digit at each of the first five evaluations of a run from scratch, while
a held-out loss beside it moved, is a model answering one class for every input (loss_eval_unchanged.py, round 24). It
now waits, as the at-chance reading does since round 47 (loss_eval_falls.both_falling), while over the latest five
evaluations the held-out loss falls at each by 1 % of its level in all and the training loss logged before each falls
at each too: the model is still learning, and what it learns reaches held-out data, so its answers may yet move
(fresh47's LeNet with a 200-way head on CIFAR-10's 10 classes: val_acc 0.1000 at epochs 1-5 while val_loss fell 2.379,
2.325, 2.315, 2.312, 2.308 and its training loss 3.156 to 2.310; 0.1322 at epoch 6, 0.386 by epoch 50). A held-out
loss that wanders beside the frozen share (fresh21's VGG19 answering castle, val_loss 0.66-0.70), or a training loss
that sits, is found as before; a wait ends when either loss stops falling with the share still frozen."""

from __future__ import annotations

import math

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, replay_both
from tests.diagnosis.test_loss_what_the_run_says import evaluation, step

FRESH47 = CURVES / "fresh47"
LENET = FRESH47 / "cifar10_lenet_200_way_head_50_epochs_at_ln10_for_epochs_2_to_6_then_1.72_val_acc_0.10_to_0.386.csv"
ALEXNETS = sorted(FRESH47.glob("cifar10_alexnet_*.csv"))
VGG19 = CURVES / "fresh21" / "vgg19_from_scratch_3way_unbalanced_at_class_prior_10_epochs.csv"
# A 200-way head on data of 10 classes (fresh47's homework): a guess at the data's classes is ln 10, far under ln 200.
CHANCE = {"val_loss": math.log(200), "val_acc": 1 / 200}


@pytest.mark.parametrize("how", [{}, {"start": 0.5}, {"start": 0.5, "renumber": True}, {"window_s": 0.0},
                                 {"start": 0.5, "renumber": True, "window_s": 0.0}])
def test_the_lenet_whose_accuracy_sat_at_one_class_while_both_losses_fell_is_quiet(how):
    assert judge(LENET, **how).faults == ()


@pytest.mark.parametrize("path", [*ALEXNETS, VGG19], ids=["alexnet_2023", "alexnet_2025", "vgg19"])
def test_the_runs_answering_one_class_are_still_found(path):
    assert len(ALEXNETS) == 2
    outcome = judge(path)
    assert outcome.expect == "loss_stalled" and outcome.right


def _run(train: list[float], held_out: list[float], share: float = 0.1) -> list:
    """A 200-way head from scratch, one training log then one evaluation an epoch, its held-out accuracy ``share``."""
    events = []
    for i, (loss, val) in enumerate(zip(train, held_out, strict=True)):
        events.append(step(i, loss, classes=200, from_scratch=True))
        events.append(evaluation(i, {"val_loss": val, "val_acc": share}, chance=CHANCE))
    return events


def _stalled(events) -> list:
    return [f for f in replay_both(events, 0.0) if f.fault == "loss_stalled"]


FALLING_TRAIN = [3.16, 2.34, 2.32, 2.31, 2.30, 2.29, 2.28]
FALLING_HELD_OUT = [2.38, 2.33, 2.31, 2.30, 2.29, 2.28, 2.27]


def test_a_frozen_share_beside_both_losses_falling_waits():
    assert _stalled(_run(FALLING_TRAIN, FALLING_HELD_OUT)) == []


def test_a_frozen_share_beside_a_held_out_loss_that_wanders_is_found():
    found = _stalled(_run(FALLING_TRAIN, [2.38, 2.33, 2.35, 2.32, 2.34, 2.33, 2.35]))
    assert len(found) == 1 and "the same to every digit" in found[0].detail


def test_a_frozen_share_beside_a_training_loss_that_sits_is_found():
    found = _stalled(_run([2.31, 2.30, 2.31, 2.30, 2.31, 2.30, 2.31], FALLING_HELD_OUT))
    assert len(found) == 1 and "the same to every digit" in found[0].detail


def test_the_wait_ends_when_the_losses_stop_falling_with_the_share_still_frozen():
    found = _stalled(_run([*FALLING_TRAIN, 2.29, 2.28, 2.29, 2.28], [*FALLING_HELD_OUT, 2.28, 2.27, 2.28, 2.27]))
    assert len(found) == 1 and "the same to every digit at each of its first 8 evaluations" in found[0].detail
