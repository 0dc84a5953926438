"""Loss round 39 (issue 54, fresh batch 36): the lead's settlement after round 38 keeps one over-fitting shape stalled,
a held-out loss worse than a guess's, and leaves the rest quiet. fresh batch 36's BERT-large symptom classifier (14,973
classes, ln = 9.61) is that shape: its training loss creeps down from 9.76 to 7.4 while its held-out loss rises from
9.71 to 10.73 and stays there, held-out accuracy 0-1.2 %. loss_eval.HeldOutWatch reads a held-out loss at or above a
tenth under ln(classes) as a guess's (``at_chance``: a loss not a tenth below its chance), so it is found by its
evaluations; an over-fitting run whose held-out loss rises from its best but stays better than a guess's is quiet."""

from __future__ import annotations

import math

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import evaluation, replay, step

MEDIMIND = CURVES / "fresh36" / ("bert_large_14973_class_symptom_classifier_train_9.76_to_7.4_eval_loss_rising_9.71_to_"
                                 "10.73_eval_acc_0_to_1pct.csv")
CLASSES = 10
GUESS = math.log(CLASSES)
LOGS, EVERY = 100, 5  # a training log every step, an evaluation every 5th: 20 evaluations


@pytest.mark.parametrize("how", [{}, {"window_s": 0.0}])
def test_the_symptom_classifier_whose_held_out_loss_rose_above_a_guess_s_is_found(how):
    outcome = judge(MEDIMIND, **how)
    assert outcome.right and outcome.faults == ("loss_stalled",)


def _run(held: list[float], train: list[float] | None = None) -> list:
    """A 10-way classifier's training loss falling from a guess's towards 0 (or ``train``), evaluated every EVERY logs."""
    train = train or [GUESS * math.exp(-i / 25) + 0.02 * (i % 3) for i in range(LOGS)]
    events = []
    for i, loss in enumerate(train):
        events.append(step(i, loss, classes=CLASSES))
        if i % EVERY == EVERY - 1:
            events.append(evaluation(i, {"val_loss": held[i // EVERY]}, chance={"val_loss": GUESS}))
    return replay(events)


def _rising_from(best: float, to: float) -> list[float]:
    """Held-out losses down to ``best`` at the 4th evaluation, then up at each of the 16 after it to ``to``."""
    return [2.0, 1.4, 1.0, best] + [best + (to - best) * k / 16 for k in range(1, 17)]


@pytest.mark.parametrize("to", [1.8, 0.85 * GUESS])
def test_over_fitting_whose_held_out_loss_stays_better_than_a_guess_s_is_quiet(to):
    assert _run(_rising_from(0.9, to)) == []


@pytest.mark.parametrize("to", [1.2 * GUESS, 2.0 * GUESS])
def test_over_fitting_whose_held_out_loss_rises_past_a_guess_s_is_found_once_it_is_there(to):
    held = _rising_from(0.9, to)
    found = _run(held)
    assert [f.fault for f in found] == ["loss_stalled"]
    # Not before the held-out loss came within a tenth of ln(classes): over-fitting below it is the settled quiet.
    first_at_guess = next(i for i, v in enumerate(held) if v >= 0.9 * GUESS) * EVERY + EVERY - 1
    step_of = int(found[0].detail.split("steps ")[1].split("-")[1].split(")")[0])
    assert step_of >= first_at_guess
    assert "at chance" in found[0].detail and f"chance {GUESS:.3f}" in found[0].detail


def test_a_training_loss_creeping_down_from_above_a_guess_while_the_held_out_loss_rises_above_it_is_found():
    train = [1.05 * GUESS - 0.3 * GUESS * i / LOGS + 0.01 * ((7 * i) % 5 - 2) for i in range(LOGS)]
    held = [1.02 * GUESS + 0.2 * GUESS * min(k, 8) / 8 for k in range(LOGS // EVERY)]
    assert [f.fault for f in _run(held, train)] == ["loss_stalled"]
