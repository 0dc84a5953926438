"""Loss round 42 (issue 54, fresh batch 39): four general readings the batch's stalled curves lacked.

* A loss at zero to float rounding (magnitude at most 1e-12, not 0) at 5 logs to every one of 4 or more printed
  digits, whatever the schedule (loss_repeated.float_zero; a DetectNet at -6.43825e-20 for 9,000 iterations).
* One value at 15 logs in a row, at 0.1 or above, printed to 2 significant digits or more, the schedule not decayed
  (loss_repeated.long_repeat; a Lightning bar's 4.600 read as 4.6).
* A classifier's loss exactly 0 at every log from the first, 3 logs at least, no held-out loss above 0
  (loss_repeated.zero_with_classes; a 101-way C3D fine-tune whose labels were missing).
* A training loss at a framework's softmax ceiling at 2 logs beside a held-out loss within 1e-5 of it
  (loss_saturated.saturated_held_out; a Caffe WRN at 87.3365 in training and 87.3362 in test).

Each is written here as a curve; the near misses beside each stay quiet."""

from __future__ import annotations

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import evaluation, replay, step

FRESH39 = CURVES / "fresh39"
FOUND = [
    "c3d_ucf101_finetune_issue_loss_0_at_iterations_20_40_60_label_missing_from_the_list.csv",
    "caffe_wrn_generator_issue_train_loss_87.3365_test_87.3362_at_iterations_1170_and_1560_lr_0.1.csv",
    "detectnet_caffe_issue_loss_-6.43825e-20_at_every_display_iterations_560_to_9640_loss_bbox_0_coverage_0.csv",
    "pytorch_lightning_issue_train_loss_4.600_at_every_printed_step_66_to_73_and_100_to_106_of_704.csv",
]


@pytest.mark.parametrize("how", [{}, {"window_s": 0.0}], ids=["own-window", "shortest-window"])
@pytest.mark.parametrize("name", FOUND)
def test_the_four_fresh39_stalls_are_found(name, how):
    outcome = judge(FRESH39 / name, **how)
    assert outcome.right and outcome.faults == ("loss_stalled",)


def _steps(losses: list[float], **more) -> list:
    return [step(i, loss, **more) for i, loss in enumerate(losses)]


# -- zero to float rounding --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("level", [-6.43825e-20, 3.14159e-15])
def test_a_loss_at_zero_to_float_rounding_is_found_through_a_decayed_schedule(level):
    events = [step(i, level, lr=1e-3 if i < 3 else 1e-6) for i in range(6)]
    found = replay(events)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "float rounding" in found[0].detail and "step 4" in found[0].detail


@pytest.mark.parametrize("losses", [
    [-6.4e-20] * 6,  # two digits: any tiny value would print so
    [1.23456e-8] * 6,  # above float rounding of zero: a fitted loss may sit there
    [-6.43825e-20, -6.43825e-20, -6.43826e-20, -6.43825e-20, -6.43825e-20, -6.43827e-20],  # never 5 alike in a row
    [0.0] * 3,  # exactly 0 is zeroed_at_once's and zero_from_the_start's
])
def test_near_misses_of_float_zero_stay_quiet(losses):
    assert replay(_steps(losses)) == []


# -- one value at fifteen logs -----------------------------------------------------------------------------------------

def test_one_value_at_fifteen_logs_is_found_at_the_fifteenth():
    found = replay(_steps([4.6] * 16))
    assert [f.fault for f in found] == ["loss_stalled"] and "step 14" in found[0].detail


@pytest.mark.parametrize("losses, lr", [
    ([4.6] * 14, None),  # fourteen logs: a coarse print may repeat that long by chance
    ([4.6] * 7 + [4.5] + [4.6] * 7, None),  # moved once among them
    ([0.03] * 16, None),  # a converged loss printed to one digit
    ([0.5] * 16, None),  # one significant digit (0.5 a tenth of its last digit)
    ([2.0] * 16, None),  # a whole number: its ".0" is repr's, one significant digit (a hand-written trace's constant)
    ([30.0] * 16, None),  # two digits, though none after the point is known
    ([4.6] * 16, "decayed"),  # a schedule decayed to nothing holds a converged loss still
])
def test_near_misses_of_a_long_repeat_stay_quiet(losses, lr):
    more = [{"lr": 1e-2 if i < 2 else 1e-6} for i in range(len(losses))] if lr else [{}] * len(losses)
    assert replay([step(i, loss, **m) for i, (loss, m) in enumerate(zip(losses, more, strict=True))]) == []


# -- a classifier's loss exactly 0 from the first log ------------------------------------------------------------------

def test_a_classifiers_loss_at_zero_from_its_first_log_is_found():
    found = replay([step(20 * (i + 1), 0.0, classes=101) for i in range(3)])
    assert [f.fault for f in found] == ["loss_stalled"] and "101-way" in found[0].detail


@pytest.mark.parametrize("events", [
    [step(20 * (i + 1), 0.0) for i in range(3)],  # no class count: a surrogate may sit at 0 while it learns
    [step(20 * (i + 1), 0.0, classes=101) for i in range(2)],  # two logs
    [step(20, 0.0, classes=101), evaluation(20, {"val_loss": 0.4}), step(40, 0.0, classes=101),
     step(60, 0.0, classes=101)],  # a held-out loss above 0: the data is scored
    [step(20, 0.3, classes=101), step(40, 0.0, classes=101), step(60, 0.0, classes=101), step(80, 0.0, classes=101)],
])
def test_near_misses_of_zero_with_classes_stay_quiet(events):
    assert replay(events) == []


# -- saturated in training and on held-out data ------------------------------------------------------------------------

def test_a_softmax_saturated_in_training_and_test_is_found_at_two_logs():
    events = [step(1170, 87.3365), evaluation(1170, {"val_loss": 87.3362}), step(1560, 87.3365)]
    found = replay(events)
    assert [f.fault for f in found] == ["loss_stalled"] and "held-out" in found[0].detail


@pytest.mark.parametrize("events", [
    [step(1170, 87.3365), step(1560, 87.3365)],  # no held-out loss: saturated wants 3 logs
    [step(1170, 87.3365), evaluation(1170, {"val_loss": 2.31}), step(1560, 87.3365)],  # the test data is scored
    [step(1170, 87.3365), evaluation(1170, {"val_loss": 87.30}), step(1560, 87.3365)],  # near, not within 1e-5
    [step(1170, 87.34), evaluation(1170, {"val_loss": 87.3362}), step(1560, 87.34)],  # training printed coarsely
    [step(1170, 11.2306), evaluation(1170, {"val_loss": 87.3362}), step(1560, 87.3365)],  # one training log there
])
def test_near_misses_of_saturated_held_out_stay_quiet(events):
    assert replay(events) == []
