"""Loss round 49 (issue 54, fresh batch 48 opened): three healthy runs flagged, each by a reading its evidence cannot
carry.

* A window alike to 6 digits says the weights no longer change only where the log printed the digits: a loss printed to
  4 decimals shows a small loss with one or two significant digits, alike at every log while it still falls
  (loss_cycle._printed_coarsely: fresh48's PaiNN regressions, 0.002 over their last 20 epochs; 0.0033 then 0.0027).
* A blow-up the weights come back from is not a run that lost what it learned: its training losses each below the one
  before at the latest 5 logs and its held-out loss at each of its latest 5 evaluations (loss_diverging._coming_back:
  fresh48's PaiNN, 0.019 at epoch 30, 9.7e11 at epoch 31, falling at each epoch to 0.002 by epoch 170).
* A held-out loss back at ln(classes) from a learned model's (more than a tenth below it before) is over-fitting's: the
  accuracy beside it is judged by its own band, not taken for a guess's at the prior (loss_eval._came_back: fresh48's
  CIFAR-100 classifier, val_loss 2.78 then 4.519 at a training loss of 0.0104, val_acc 0.3045).

Each beside what it must still find: a run blown up and held to 5 printed digits, a collapse held on both losses, a
guess at the prior that never learned."""

from __future__ import annotations

import math

import pytest

from faultlens.diagnosis.rules.loss_curve import LossCurve
from faultlens.diagnosis.rules.loss_cycle import window_frozen
from faultlens.diagnosis.rules.loss_diverging import lost_what_it_learned_held_out
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, replay_both
from tests.diagnosis.test_loss_what_the_run_says import evaluation, step

FRESH48 = CURVES / "fresh48"
HEALTHY = [
    FRESH48 / "painn_qm9_resumed_at_epoch_80_of_500_mse_0.0155_to_0.0025_over_363_epochs.csv",
    FRESH48 / "painn_qm9_param2_first_epoch_mse_4e11_then_8e5_spikes_to_5.5e6_down_to_0.0020_over_170_epochs.csv",
    FRESH48 / "cifar100_clip_classifier_from_scratch_lr5e-5_cosine_restarts_4.00_to_9e-4_val_loss_2.78_rising_to_5.4_"
              "val_acc_0.30.csv",
]
STALLED = [
    FRESH48 / "painn_qm9_dynamofix_mse_blown_up_to_3.194e31_from_epoch_2_frozen_for_621_epochs_job_killed_at_622.csv",
    FRESH48 / "cifar100_clip_vit_b32_fine_tune_lr1e-3_learns_to_19pct_then_collapses_at_epoch_34_loss_4.0_acc_8pct_for"
              "_67_epochs.csv",
    CURVES / "fresh30" / "wav2vec2_xlsr_ctc_finetune_learned_to_2114_then_collapsed_to_8600_cer_1.0_lr_3e-4.csv",
    CURVES / "fresh12" / "btc_conv_lstm_3_way_at_ln3_5_epochs.csv",
]


@pytest.mark.parametrize("how", [{}, {"start": 0.5}, {"start": 0.5, "renumber": True}, {"window_s": 0.0},
                                 {"start": 0.5, "renumber": True, "window_s": 0.0}])
@pytest.mark.parametrize("path", HEALTHY, ids=["painn_resumed", "painn_blow_up", "cifar100_over_fits"])
def test_fresh48_s_three_flagged_healthy_runs_are_quiet(path, how):
    outcome = judge(path, **how)
    assert outcome.expect == "quiet" and outcome.faults == (), outcome.faults


@pytest.mark.parametrize("path", STALLED, ids=["painn_frozen_3e31", "clip_collapse", "wav2vec2", "btc"])
def test_the_stalled_look_alikes_are_still_found(path):
    outcome = judge(path)
    assert outcome.expect != "quiet" and outcome.right, outcome.faults


# -- a window printed coarsely ------------------------------------------------------------------------------------------

def test_a_window_alike_at_a_coarse_print_is_no_frozen_weights():
    curve = LossCurve(0)
    assert window_frozen(curve, [0.002] * 20, 0.002, "steps 1-20") is None  # one significant digit
    assert window_frozen(curve, [0.0033] * 20, 0.0033, "steps 1-20") is None  # two
    assert window_frozen(curve, [0.0021] * 3 + [0.002] * 17, 0.002, "steps 1-20") is None


def test_a_window_alike_to_its_printed_digits_is_still_frozen():
    curve = LossCurve(0)
    assert window_frozen(curve, [3.194e31] * 20, 3.194e31, "steps 1-20") is not None
    assert window_frozen(curve, [2.302585] * 20, 2.302585, "steps 1-20") is not None
    assert window_frozen(curve, [0.6931] * 20, 0.6931, "steps 1-20") is not None


# -- a blow-up the weights come back from ------------------------------------------------------------------------------

LEARNED = [4e11, 8.3e5, 1.4e6, 5.5e6, 6.9e4, 2e4, 538.0, 474.0, 59.5, 5.69, 0.26, 0.15, 0.074, 0.039, 0.019]
HELD_OUT = [2.4e5, 5.3e5, 2.8e6, 4.5e4, 1.4e4, 1.9e4, 628.0, 520.0, 16.6, 8.5, 0.148, 0.099, 0.048, 0.021, 0.0154]


def _blown(train: list[float], held: list[float]) -> list:
    events = []
    for i, (loss, val) in enumerate(zip([*LEARNED, *train], [*HELD_OUT, *held], strict=True)):
        events += [step(i + 1, loss), evaluation(i + 1, {"val_loss": val})]
    return events


def test_a_blow_up_both_losses_come_back_from_at_each_log_is_not_lost():
    found = replay_both(_blown([9.7e11, 1.17e7, 7.28e6, 3.69e6, 1.57e6], [5.58e6, 3.72e6, 1.97e6, 8.84e5, 3.28e5]), 0.0)
    assert not [f for f in found if "lost what it learned" in f.detail], [f.detail for f in found]


@pytest.mark.parametrize("train, held", [
    ([9.7e11, 1.17e7, 7.28e6, 3.69e6, 1.57e6], [5.58e6, 3.72e6, 3.9e6, 8.84e5, 3.28e5]),  # held out worse at one
    ([9.7e11, 1.17e7, 7.28e6, 7.5e6, 1.57e6], [5.58e6, 3.72e6, 1.97e6, 8.84e5, 3.28e5]),  # training worse at one
    ([9.7e11, 9.1e11, 9.4e11, 9.2e11, 9.3e11], [5.58e6, 5.6e6, 5.5e6, 5.7e6, 5.6e6]),  # held on both
], ids=["held_out_not_mending", "training_not_mending", "held"])
def test_a_blow_up_not_mending_at_each_log_of_both_is_still_lost(train, held):
    curve = LossCurve(0)
    losses = [*LEARNED, *train]
    for i, loss in enumerate(losses):
        curve.hold(i + 1, loss)
    curve.first, curve.lowest = losses[0], min(losses)
    kept = {"val_loss": [(i + 1, v, False) for i, v in enumerate([*HELD_OUT, *held])]}
    verdict = lost_what_it_learned_held_out(curve, kept, len(losses))
    assert verdict is not None and "lost what it learned" in verdict.why


# -- a held-out loss back at a guess's from a learned model's ---------------------------------------------------------

CHANCE = {"val_loss": math.log(100), "val_acc": 0.01}


def _over_fit(vals: list[float]) -> list:
    # Training loss fitted (under a tenth of ln 100) from the 3rd epoch; the held-out loss up to 4.52, within 2 % of ln 100.
    events = []
    for i, val in enumerate(vals):
        events += [step(i + 1, [2.1, 0.9, 0.02, 0.01, 0.012, 0.0104][i], classes=100),
                   evaluation(i + 1, {"val_loss": val, "val_acc": 0.3045}, chance=CHANCE)]
    return events


def test_an_accuracy_thirty_times_a_guess_s_beside_a_held_out_loss_back_at_ln_100_is_no_guess():
    assert replay_both(_over_fit([2.88, 2.78, 3.4, 3.8, 4.2, 4.52]), 0.0) == []


def test_a_held_out_loss_at_ln_100_that_was_never_a_learned_model_s_still_takes_its_share_for_a_guess():
    # The same evaluations where the held-out loss was never a tenth under ln 100: a guess at the prior as before.
    found = replay_both(_over_fit([4.3, 4.35, 4.2, 4.3, 4.45, 4.52]), 0.0)
    assert [f.fault for f in found] == ["loss_stalled"] and "at chance" in found[0].detail


# -- every held-out metric worse than at its first evaluation while training does not fall -----------------------------

DEAD = FRESH48 / "mnist_mlp_numpy_dead_neurons_rmsprop_lr0.1_3.12_then_stuck_at_1.9_val_acc_0.20_for_15_epochs.csv"
FELL_BACK = "lost what its first epoch learned"
TRAIN = [3.12, 1.63, 1.75, 1.78, 1.68, 1.83, 1.94, 1.94, 1.95, 1.91, 1.91, 1.90, 1.90, 1.94, 1.99, 1.91, 1.87, 1.97]
VAL_LOSS = [1.80, 3.51, 1.86, 1.87, 1.71, 1.93, 1.94, 1.97, 1.91, 1.96, 1.92, 1.89, 2.00, 1.88, 1.98, 1.85, 1.90, 1.90]
VAL_ACC = [0.29, 0.29, 0.24, 0.27, 0.28, 0.20, 0.20, 0.19, 0.21, 0.16, 0.19, 0.18, 0.18, 0.20, 0.21, 0.19, 0.18, 0.21]


def _fell_back(train=TRAIN, val_loss=VAL_LOSS, val_acc=VAL_ACC, **said) -> list:
    said = {"classes": 10, "from_scratch": True, **said}
    events = []
    for i, (loss, vl, va) in enumerate(zip(train, val_loss, val_acc, strict=True)):
        metrics = {"val_loss": vl} if va is None else {"val_loss": vl, "val_acc": va}
        events += [step(i + 1, loss, **said), evaluation(i + 1, metrics)]
    return events


def test_the_dead_neurons_mlp_is_found_with_a_quarter_of_its_epochs_left():
    outcome = judge(DEAD)
    assert outcome.right and outcome.at is not None and outcome.at <= 0.75


def test_a_run_whose_every_held_out_metric_fell_back_from_its_first_while_training_sits_is_found():
    found = replay_both(_fell_back(), 0.0)
    assert [f.fault for f in found] == ["loss_stalled"] and FELL_BACK in found[0].detail


@pytest.mark.parametrize("change", [
    {"train": [*TRAIN[:8], *(1.9 - 0.08 * i for i in range(10))]},  # training still falling at each log
    {"train": [*TRAIN[:8], *([0.05] * 10)]},  # training fitted: over-fitting, not a stall
    {"val_acc": [*VAL_ACC[:14], 0.30, *VAL_ACC[15:]]},  # an accuracy better than the first at epoch 15
    {"val_loss": [*VAL_LOSS[:14], 1.75, *VAL_LOSS[15:]]},  # a held-out loss better than the first at epoch 15
    {"val_acc": [None] * len(VAL_ACC)},  # no accuracy: a loss alone
    {"from_scratch": False, "classes": 100},  # watched from a trained model (1.8 under 9/10 of ln 100)
], ids=["training_falls", "fitted", "accuracy_better", "loss_better", "no_accuracy", "trained_start"])
def test_its_near_misses_stay_quiet(change):
    kwargs = {k: v for k, v in change.items() if k in ("train", "val_loss", "val_acc")}
    said = {k: v for k, v in change.items() if k not in kwargs}
    found = replay_both(_fell_back(**kwargs, **said), 0.0)
    assert not [f for f in found if FELL_BACK in f.detail], [f.detail for f in found]
