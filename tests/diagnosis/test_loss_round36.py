"""Loss round 36 (issue 54, fresh batch 33): two shapes no reading had.

A run that left where it was first seen for a level it holds: the latest 5 logs each five times its first loss, within
a factor of 2 of each other, every log since the first above it (loss_diverging.held_above_first): a YOLOv4 restored
from its checkpoint at 10.57 and at 98-136 for the 9 logs after, and a re-identification network at 10.8 at iteration
0 climbing to 70-86. And a loss at exactly 0 from the first log, watched from its start, while every held-out loss
evaluated is 0 too (loss_cycle.zero_from_the_start): an Inception-v1 classifier at 0.000000 with held-out accuracy 1
from step 0."""

from __future__ import annotations

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import evaluation, replay, step

FRESH33 = CURVES / "fresh33"
HELD = [FRESH33 / "yolov4_tf_restored_checkpoint_total_loss_10.57_then_98_to_136_lr_printed_0.csv",
        FRESH33 / "mar_reid_market_stage1_epoch0_loss_total_10.8_climbing_to_85_title_nan_error.csv"]
ZERO = FRESH33 / "inception_v1_tf_classifier_train_and_val_loss_0.000000_accuracy_1_from_step_0.csv"


@pytest.mark.parametrize("path", [*HELD, ZERO], ids=lambda p: p.name[:40])
def test_fresh33_s_broken_restore_climb_and_zero_from_the_start_are_found(path):
    outcome = judge(path)
    assert outcome.right and outcome.faults == ("loss_stalled",)


def _losses(values, **said) -> list:
    return replay([step(i, v, **said) for i, v in enumerate(values, 1)])


def test_a_loss_that_jumps_fivefold_and_holds_its_level_is_found_at_the_fifth_log_there():
    found = _losses([10.0, 60.0, 55.0, 70.0, 65.0, 58.0], from_scratch=False)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "55-70 at each of the latest 5 logs (steps 2-6), 5.5x its first loss 10" in found[0].detail
    assert _losses([10.0, 60.0, 55.0, 70.0, 65.0]) == []  # 4 logs at the new level: not yet held


@pytest.mark.parametrize("values", [
    [10.0, 45.0, 42.0, 48.0, 44.0, 46.0],  # four and a half times its first: under the fold
    [10.0, 60.0, 9.5, 70.0, 65.0, 58.0, 62.0, 61.0],  # back under its first once since: a level it returns to
    [10.0, 60.0, 150.0, 70.0, 65.0, 58.0],  # spread by more than a factor of 2: a scatter, not a level
    [0.001, 0.04, 0.05, 0.03, 0.045, 0.05],  # a first loss near zero: no level a fold measures
    [-1.0, 10.0, 11.0, 12.0, 10.5, 11.5],  # a signed loss (a surrogate): no floor
], ids=["fold", "came-back", "scatter", "near-zero", "signed"])
def test_a_rise_that_is_not_a_held_fivefold_level_above_the_first_loss_stays_quiet(values):
    assert _losses(values) == []


def _zeros(n, held_out=None, first=0.0) -> list:
    events = []
    for i in range(n):
        if held_out is not None and i % 2 == 0:
            events.append(evaluation(10 * i, {"val_loss": held_out, "val_acc": 1.0}))
        events.append(step(10 * i, first if i == 0 else 0.0))
    return replay(events)


def test_a_loss_at_zero_from_the_first_log_with_a_held_out_loss_at_zero_is_found_at_its_third_log():
    found = _zeros(3, held_out=0.0)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "loss 0 at every log from the first (3 logs, steps 0-20) and held-out loss 0 at every evaluation so far (2)" \
        in found[0].detail
    assert _zeros(2, held_out=0.0) == []  # 2 logs: too few


def test_a_loss_at_zero_from_the_start_with_no_held_out_loss_or_one_above_zero_stays_quiet():
    # A GRPO surrogate sits at 0 from its start while it learns (fresh batch 21), with no held-out loss at 0.
    assert _zeros(8) == []
    assert _zeros(8, held_out=0.0123) == []
    # From a level to 0 is loss_cycle.zeroed_at_once's (5 logs at 0), not this reading.
    assert _zeros(4, held_out=0.0, first=1.4138) == []


def test_a_loss_at_zero_first_seen_mid_run_is_not_read_as_scoring_nothing():
    events = []
    for i in range(5000, 5003):
        events.append(evaluation(i, {"val_loss": 0.0}))
        events.append(step(i, 0.0))
    assert replay(events) == []
