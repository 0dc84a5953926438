"""Loss round 38 (issue 54, fresh batch 35): a held-out loss ten times every evaluation before it, beside a training
loss at the same step ten times every loss before it, is the weights coming apart, not one batch's spike
(loss_diverging.blown_up_held_out): fresh batch 35's LadderNet, train loss 0.348 to 0.160 over epochs 0-3, then 1.6e18
at its 5th and last log, its validation loss 3.05 to 1.9e7 there. A training spike alone, a held-out jump alone, or
an evaluation at another step than the spike says nothing of the weights as a whole, and stays quiet."""

from __future__ import annotations

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import evaluation, replay, step

LADDERNET = CURVES / "fresh35" / ("laddernet_retina_vessels_epochs_0_to_3_loss_0.348_to_0.160_valid_5.11_to_3.05_epoch_4"
                                  "_loss_1.6e18_valid_1.9e7.csv")
TRAIN = [0.35, 0.22, 0.18, 0.16]
HELD = [5.1, 3.3, 3.2, 3.0]


@pytest.mark.parametrize("how", [{}, {"window_s": 0.0}])
def test_the_laddernet_blown_up_on_training_and_held_out_data_at_once_is_found(how):
    outcome = judge(LADDERNET, **how)
    assert outcome.right and outcome.faults == ("loss_stalled",)


def _run(train: list[float], held: list[float | None]) -> list:
    events = []
    for i, (loss, val) in enumerate(zip(train, held, strict=True)):
        events.append(step(i, loss))
        if val is not None:
            events.append(evaluation(i, {"val_loss": val}))
    return replay(events)


def test_both_losses_tenfold_at_one_evaluation_are_found_there():
    found = _run([*TRAIN, 40.0], [*HELD, 300.0])
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "step 4" in found[0].detail and "the weights came apart" in found[0].detail


@pytest.mark.parametrize("train_last, held_last", [
    (40.0, 3.1),  # a training spike the held-out data does not see: one batch's
    (0.15, 300.0),  # a held-out jump the training loss does not share
    (1.5, 29.0),  # each less than tenfold
])
def test_one_loss_alone_or_less_than_tenfold_is_quiet(train_last, held_last):
    assert _run([*TRAIN, train_last], [*HELD, held_last]) == []


def test_a_held_out_loss_evaluated_before_the_spike_says_nothing_of_it():
    assert _run([*TRAIN, 40.0], [*HELD[:3], 300.0, None]) == []


def test_a_loss_first_near_zero_has_no_level_a_fold_measures():
    assert _run([1e-4, 2e-4, 1e-4, 3e-4, 0.5], [*HELD, 300.0]) == []
