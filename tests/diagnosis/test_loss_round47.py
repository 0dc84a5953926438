"""Loss round 47 (issue 54, fresh batch 46 opened): a held-out loss and the training loss beside it both still falling,
and a new head on a trained body measured from its guess's start.

* Five evaluations at chance wait while the held-out loss falls at each of them by 1 % of its level in all and the
  training loss logged before each falls at each too, whichever side of ln(classes) either sits
  (loss_eval_falls.both_falling): the model is still learning, and what it learns reaches held-out data (fresh46's Keras
  Conv1D classifier: val_loss 2.4073, 2.4051, 2.4050, 2.3832, 2.3405, then on through ln 10 to 2.2354, its training
  loss 3.13 to 2.06, held-out accuracy 0.1000 until epoch 11, then 0.21-0.76). A held-out loss that sits, or a training
  loss that sits beside a falling held-out one (a model settling onto a level), is judged as before.
* "Never learned" is measured from a new head's guess's loss though the trainer says the run resumed (a frozen
  pretrained base whose features are extracted: loss_start.untrained_head; the lead's settlement for fresh46's
  EfficientNetB7 feature extractor)."""

from __future__ import annotations

import math

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, replay_both
from tests.diagnosis.test_loss_what_the_run_says import evaluation, step

FRESH46 = CURVES / "fresh46"
CONV1D = FRESH46 / "keras_conv1d_10_way_example_first_85_of_200_epochs_val_acc_0.1000_epochs_2_to_11_then_0.76_val_loss_2.41_to_1.03.csv"
GTZAN = FRESH46 / "gtzan_msecnn_notebook_100_epochs_loss_2.31_to_1.02_train_acc_0.10_to_0.22_val_acc_0.08_to_0.24_predicts_one_class.csv"
EFFICIENTNET = FRESH46 / "efficientnetb7_feature_extraction_10_percent_notebook_5_epochs_loss_2.43_to_2.36_at_ln10_val_acc_0.1000_to_0.1004_test_acc_0.1004.csv"
STOCK = sorted((CURVES / "fresh44").glob("stock_chart_cnn_notes_run_[23]_*.csv"))
LN10 = math.log(10)


@pytest.mark.parametrize("how", [{}, {"start": 0.5}, {"start": 0.5, "renumber": True}, {"window_s": 0.0},
                                 {"start": 0.5, "renumber": True, "window_s": 0.0}])
def test_the_conv1d_classifier_whose_held_out_and_training_loss_fall_through_chance_is_quiet(how):
    assert judge(CONV1D, **how).faults == ()


@pytest.mark.parametrize("path", [GTZAN, EFFICIENTNET], ids=["gtzan", "efficientnet"])
def test_the_settled_stalled_runs_are_found(path):
    # The lead's settlements: the GTZAN sigmoid tagger at a guess's accuracy stays stalled; so does the frozen
    # EfficientNetB7 base whose new head sits at ln 10 for all 5 epochs.
    outcome = judge(path)
    assert outcome.expect == "loss_stalled" and outcome.right


@pytest.mark.parametrize("path", STOCK, ids=["run2", "run3"])
def test_runs_settling_onto_ln2_from_above_are_still_found_where_they_were(path):
    # Held-out and training loss both creep onto ln 2 from above (0.6952, 0.6946, 0.6941, 0.6940, 0.6938): falling at
    # each evaluation, by 0.2-0.4 % over five, under the 1 % that says the held-out loss still learns.
    assert len(STOCK) == 2
    outcome = judge(path)
    assert outcome.right and outcome.at is not None and outcome.at < 0.31


ACCURACY = [0.0875, 0.1, 0.1125, 0.1, 0.0875, 0.1, 0.1125]  # a guess's, moving (no answer frozen)


def _head(train: list[float], held_out: list[float]) -> list:
    """A 10-way classifier from scratch, one training log then one evaluation an epoch."""
    events = []
    for i, (loss, val) in enumerate(zip(train, held_out, strict=False)):
        events.append(step(i, loss, classes=10, from_scratch=True))
        events.append(evaluation(i, {"val_loss": val, "val_acc": ACCURACY[i]},
                                 chance={"val_loss": LN10, "val_acc": 0.1}))
    return events


FALLING_HELD_OUT = [2.41, 2.40, 2.38, 2.35, 2.31, 2.29, 2.27]


def _stalled(events) -> list:
    return [f for f in replay_both(events, 0.0) if f.fault == "loss_stalled"]


def test_a_held_out_loss_falling_through_chance_beside_a_falling_training_loss_waits():
    assert _stalled(_head([3.1, 2.7, 2.55, 2.45, 2.39, 2.33, 2.28], FALLING_HELD_OUT)) == []


def test_the_same_held_out_loss_beside_a_training_loss_that_sits_is_at_chance():
    found = _stalled(_head([2.33, 2.31, 2.34, 2.32, 2.33, 2.31, 2.34], FALLING_HELD_OUT))
    assert len(found) == 1 and "at chance over the last 5 evaluations" in found[0].detail


def test_a_held_out_loss_that_sits_beside_a_falling_training_loss_is_at_chance():
    # A model fitting its batches while nothing reaches held-out data (fresh batch 10's IMDB classifier's shape).
    found = _stalled(_head([3.1, 2.7, 2.55, 2.45, 2.39], [2.305, 2.303, 2.306, 2.302, 2.304]))
    assert len(found) == 1 and "held-out val_loss" in found[0].detail


def test_a_held_out_loss_creeping_by_under_a_hundredth_is_at_chance_though_both_fall():
    found = _stalled(_head([3.1, 2.7, 2.55, 2.45, 2.39], [2.3100, 2.3080, 2.3060, 2.3040, 2.3020]))
    assert len(found) == 1


def _new_head(first: float, scratch: bool | None, start: int = 0, n: int = 60) -> list:
    """A new 10-way head's training loss, its first log ``first`` and every later one within 1 % of it (no cycle)."""
    return [step(start + i, first * (1 + 0.008 * math.sin(1.7 * i)), classes=10,
                 **({} if scratch is None else {"from_scratch": scratch})) for i in range(n)]


def test_a_new_head_on_a_trained_body_at_a_guess_s_loss_that_never_falls_never_learned():
    # The trainer says the run resumed (its body is pretrained), but the head starts at 2.20, 0.96 of ln 10: it is
    # measured from there, and 60 logs within 1 % of it have not learned.
    found = _stalled(_new_head(2.20, scratch=False))
    assert len(found) == 1 and "has not fallen below its start" in found[0].detail


@pytest.mark.parametrize("first, scratch, start", [(1.5, False, 0), (2.20, False, 5000), (1.5, None, 0)],
                         ids=["a-trained-model-s-loss", "first-seen-mid-run", "no-word-far-below-a-guess"])
def test_a_resumed_run_far_below_a_guess_or_first_seen_mid_run_is_not_called_never_learned(first, scratch, start):
    assert _stalled(_new_head(first, scratch, start)) == []
