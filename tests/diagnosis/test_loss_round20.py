"""What a person reads beside a training loss at chance (issue 54, fresh batch 17; loss_eval.HeldOutWatch.leaving,
loss_chance.py, callback_support.eval_chance): a held-out loss falling faster at each evaluation is a plateau at
chance that is ending, one that wanders or crawls at the same pace is a stall; an R² at or below 0 is a regressor
answering its target's mean."""

from __future__ import annotations

import math

from faultlens.trainer_hooks.callback_support import eval_chance
from tests.diagnosis.test_loss_what_the_run_says import evaluation, noise, replay, step

GUESS = math.log(10)


def at_ln10(held_out) -> list:
    """A 10-way classifier from random weights, its training loss at ln 10 (1 % noise) for 400 steps, its
    held-out loss ``held_out(k)`` at its k-th evaluation, one every 40 steps from step 0."""
    events = []
    for i in range(400):
        if i % 40 == 0:
            k = i // 40
            value = held_out(k)
            events.append(evaluation(i, {"val_loss": value}, chance={"val_loss": GUESS}))
        events.append(step(i + 1, GUESS * (1 + 0.01 * noise(i)), classes=10, from_scratch=True))
    return events


def test_a_held_out_loss_falling_faster_at_each_evaluation_keeps_a_loss_at_chance_quiet():
    # fresh batch 17's MNIST CNN v15: 2.3038, 2.3007, 2.2974, 2.2937, 2.2886 ... then 0.33 by its last epoch.
    assert replay(at_ln10(lambda k: 2.3038 - sum(0.003 * 1.3**j for j in range(k)))) == []


def test_a_held_out_loss_that_wanders_at_chance_is_found():
    # Its twin v13, never leaving chance: val_loss 2.3016-2.3060 at every epoch.
    found = replay(at_ln10(lambda k: 2.3038 + 0.002 * noise(k + 7)))
    assert found and "chance" in found[0].detail


def test_a_held_out_loss_crawling_by_the_same_step_or_by_next_to_nothing_is_found():
    # The same fall each time (a learning rate far too low), or a fall faster each time by millionths.
    for held_out in (lambda k: 2.3038 - 0.003 * k, lambda k: 2.3038 - sum(2e-6 * 1.3**j for j in range(k))):
        found = replay(at_ln10(held_out))
        assert found and "chance" in found[0].detail


def regression(r2: float) -> list:
    """An MSE regression with no class count, its loss flat at 10 (20 % noise), its held-out R² ``r2``
    (0.5 % noise) at an evaluation every 10 steps, higher is better by the trainer's word."""
    events = []
    for i in range(100):
        events.append(step(i, 10 * (1 + 0.2 * noise(i))))
        if i % 10 == 9:
            metrics = {"val_r2": r2 + 0.005 * noise(i + 3)}
            events.append(
                evaluation(i, metrics, chance=eval_chance(metrics, None, None, None), higher_is_better={"val_r2": True})
            )
    return events


def test_an_r2_below_zero_is_a_regressor_answering_its_target_s_mean():
    # fresh batch 17's stock-return regression: val_r2 -0.033 to -0.021 for 100 epochs.
    assert eval_chance({"val_r2": -0.03, "r2_score": 0.2, "val_rmse": 3.0}, None, None, None) == {"val_r2": 0.0, "r2_score": 0.0}
    found = replay(regression(-0.03))
    assert found and "val_r2" in found[0].detail
    assert replay(regression(0.17)) == []  # a standardised margin at 0.833 of its variance: learned what it can
