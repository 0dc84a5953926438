"""Loss round 29 (issue 54, fresh batch 26): a run that learned far below a guess's loss and is a tenth above it at 5
logs in a row is worse than a guess; a run first seen after it has trained that sits at a guess's loss to four digits
at 10 logs in a row answers uniformly whatever its input (loss_chance.collapsed). A spike above a guess that comes
back, a run at a guess's loss from its random start, and one whose held-out metric left chance are none of these."""

from __future__ import annotations

import math

import pytest

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, read_curve, replay

STARCODER = CURVES / "fresh26" / "starcoderbase_15b_qlora_lr5e-3_6_row_overfit_loss_1.0_up_to_29.6.csv"
DINO = CURVES / "fresh26" / "dino_vit_self_supervised_frozen_at_ln_65536_epochs_201_to_211.csv"
GUESS = math.log(1000)  # 6.9078


def _step(step: int, loss: float, classes: int = 1000) -> Envelope:
    data = {"rank": 0, "step": step, "loss": loss, "classes": classes}
    return Envelope(ts=1e9 + step, job="j", node="n0", source="train", kind="step", data=data)


def _eval(step: int, metrics: dict[str, float], chance: dict[str, float]) -> Envelope:
    data = {"rank": 0, "step": step, "metrics": metrics, "chance": chance}
    return Envelope(ts=1e9 + step, job="j", node="n0", source="train", kind="eval", data=data)


def _details(events: list[Envelope]) -> list[str]:
    return [f.detail for f in replay(events, LossStalledDetector(window_s=0.0))]


@pytest.mark.parametrize(
    ("path", "reading", "at"),
    [(STARCODER, "worse than a uniform guess", "step 80"), (DINO, "uniform guess whatever its input", "step 210")],
    ids=["starcoderbase_qlora_lr_0.005_its_5th_log_above_a_guess", "dino_at_ln_65536_first_seen_at_epoch_201_its_10th_log"],
)
def test_the_two_runs_of_fresh_batch_26_are_found_by_the_reading_that_fits_them(path, reading, at):
    found = replay(read_curve(path)[0], LossStalledDetector(window_s=0.0))
    assert len(found) == 1 and reading in found[0].detail and at in found[0].detail
    assert judge(path).right


def test_above_a_guess_for_fewer_logs_or_never_below_half_of_it_is_not_worse_than_a_guess():
    learned = [_step(s, 1.0) for s in range(1, 9)]
    spike = [_step(s, 9.0) for s in range(9, 13)]  # 4 logs a tenth above ln 1000, then back
    assert _details(learned + spike + [_step(13, 1.1)]) == []
    assert ["worse than a uniform guess" in d for d in _details(learned + spike + [_step(13, 9.5)])] == [True]
    # Never below half a guess's (a warm-up's rise from an untrained model's 7.2): no knowledge to lose.
    rise = [_step(s, 7.2) for s in range(1, 4)] + [_step(s, 9.0) for s in range(4, 10)]
    assert not any("worse than a uniform guess" in d for d in _details(rise))


def test_a_guess_s_loss_to_four_digits_is_no_collapse_from_the_start_off_by_more_or_beside_a_held_out_metric():
    exact = [_step(s, round(GUESS, 4)) for s in range(500, 510)]
    assert ["whatever its input" in d for d in _details(exact)] == [True]
    # Watched from its start: random weights answer alike before the run learns (the window judges it).
    assert not any("whatever its input" in d for d in _details([_step(s, round(GUESS, 4)) for s in range(1, 11)]))
    # A batch's answers moving the loss by a thousandth of it: not a uniform output.
    assert _details([_step(s, GUESS * (1 + 1e-3 * (-1) ** s)) for s in range(500, 510)]) == []
    # A held-out accuracy that left chance (1/1000): the model predicts better than a guess.
    assert _details([_eval(499, {"val_accuracy": 0.4}, {"val_accuracy": 0.001}), *exact]) == []
