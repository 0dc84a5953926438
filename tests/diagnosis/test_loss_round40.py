"""Loss round 40 (issue 54, fresh batch 37): three general readings the batch's stalled curves lacked.

* A loss at the ceiling a framework clips a softmax loss at (Caffe's -ln FLT_MIN = 87.3365, Keras's -ln 1e-7 =
  16.1181) at 3 logs in a row: every sample's true class at probability 0 (loss_saturated.py; the Caffe GoogleNet,
  11.2306 then 87.3365 at 3 logs).
* A held-out loss the same to every digit at each of its first 5 evaluations from random weights while the training
  loss moved: outputs that depend on nothing (loss_eval_frozen.py; two triplet FaceNets at their margin, 0.2000).
* A loss from random weights within 1e-5 of its level at 5 logs printed to a millionth, though no two alike
  (loss_near_frozen.py; the activity-recognition CNN at 10.845976-10.845994).

Each is written here as a curve; the near misses beside each stay quiet."""

from __future__ import annotations

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import evaluation, replay, step

FRESH37 = CURVES / "fresh37"
FOUND = [
    "caffe_googlenet_base_lr_0.01_iteration_0_loss_11.23_then_87.3365_at_every_100_iterations.csv",
    "har_cnn_issue_loss_frozen_10.8459_for_8_epochs_train_acc_0.0548.csv",
    "keras_facenet_triplet_issue_train_loss_270_3.5_2520_24_104_val_loss_0.2000_at_every_epoch.csv",
    "keras_facenet_triplet_val_loss_frozen_at_margin_0.2000_for_8_epochs_train_0.190_to_0.1775.csv",
]


@pytest.mark.parametrize("how", [{}, {"window_s": 0.0}], ids=["own-window", "shortest-window"])
@pytest.mark.parametrize("name", FOUND)
def test_the_four_fresh37_stalls_are_found(name, how):
    outcome = judge(FRESH37 / name, **how)
    assert outcome.right and outcome.faults == ("loss_stalled",)


def _steps(losses: list[float], **more) -> list:
    return [step(i, loss, **more) for i, loss in enumerate(losses)]


# -- a loss at a framework's saturated-softmax ceiling --------------------------------------------------------------

@pytest.mark.parametrize("ceiling", [87.3365, 87.33654, 87.33654663085938, 16.1181])
def test_three_logs_at_a_ceiling_are_found(ceiling):
    found = replay(_steps([11.2, 9.8, ceiling, ceiling, ceiling]))
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "step 4" in found[0].detail and "probability 0" in found[0].detail


@pytest.mark.parametrize("losses", [
    [11.2, 9.8, 87.3365, 87.3365],  # two logs: one more may move on
    [11.2, 9.8, 87.3365, 87.3365, 80.1],  # passed through it
    [11.2, 9.8, 87.34, 87.34, 87.34],  # printed to a hundredth: any loss near there
    [11.2, 9.8, 87.3371, 87.3371, 87.3371],  # a hundred-thousandth off: another value, repeated
])
def test_near_a_ceiling_or_too_few_logs_is_no_reading_of_it(losses):
    found = replay(_steps(losses))
    assert not any("probability 0" in f.detail for f in found)


# -- a held-out loss unchanged from its first evaluation while the training loss moves -----------------------------

def _triplet(train: list[float], held: list[float], shares: list[float] | None = None, **more) -> list:
    events = []
    for i, (loss, val) in enumerate(zip(train, held, strict=True)):
        events.append(step(i, loss, **more))
        metrics = {"val_loss": val} if shares is None else {"val_loss": val, "val_accuracy": shares[i]}
        events.append(evaluation(i, metrics))
    return replay(events)


TRAIN = [0.1902, 0.1872, 0.1844, 0.1820, 0.1794, 0.1777]


def test_a_held_out_loss_unchanged_at_five_evaluations_from_scratch_is_found():
    found = _triplet(TRAIN, [0.2] * 6, from_scratch=True)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "step 4" in found[0].detail and "val_loss 0.2 the same to every digit" in found[0].detail


@pytest.mark.parametrize("train, held, how", [
    (TRAIN, [0.2] * 6, {"from_scratch": False}),  # a fine-tune starts converged: it may repeat itself
    (TRAIN, [0.2] * 6, {}),  # nothing says the start was an untrained model
    (TRAIN, [0.2] * 4 + [0.1999, 0.2], {"from_scratch": True}),  # moved once
    ([0.1902, 0.1901, 0.1902, 0.1901, 0.1902, 0.1901], [0.2] * 6, {"from_scratch": True}),  # nothing moved at all
    (TRAIN, [0.0] * 6, {"from_scratch": True}),  # a fitted held-out set
])
def test_a_held_out_loss_that_moved_or_a_run_that_did_not_is_quiet(train, held, how):
    assert _triplet(train, held, **how) == []


@pytest.mark.parametrize("shares", [
    [0.7294] * 6,  # repeated with the loss to every digit: one evaluation logged again (round 24)
    [0.41, 0.47, 0.52, 0.55, 0.58, 0.61],  # an accuracy that moved: the outputs did
])
def test_a_held_out_loss_repeated_beside_an_accuracy_is_the_accuracy_s_to_read(shares):
    assert _triplet(TRAIN, [0.2] * 6, shares, from_scratch=True) == []


# -- a loss from random weights moving in its sixth digit only ---------------------------------------------------

HAR = [10.845988, 10.845994, 10.845989, 10.84598, 10.845976, 10.845982]


def test_a_loss_within_a_hundred_thousandth_from_scratch_is_found():
    found = replay(_steps(HAR, from_scratch=True))
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "step 4" in found[0].detail and "within 1e-05" in found[0].detail


@pytest.mark.parametrize("losses, how", [
    (HAR, {"from_scratch": False}),  # a trained model's
    (HAR, {}),  # nothing says the start was random weights (no class count either)
    ([10.8460, 10.8459, 10.8460, 10.8460, 10.8459, 10.8460], {"from_scratch": True}),  # printed too coarsely to show it
    ([10.845988, 10.845094, 10.844989, 10.84398, 10.842976, 10.841982], {"from_scratch": True}),  # moving
    ([2.302588, 2.302583, 2.302586, 2.302581, 2.302584, 2.302587], {"from_scratch": True, "classes": 10}),  # ln 10
])
def test_a_moving_loss_a_trained_start_or_a_guess_is_quiet(losses, how):
    found = replay(_steps(losses, **how))
    assert not any("within 1e-05" in f.detail for f in found)
