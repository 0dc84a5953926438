"""Loss round 21 (issue 54, fresh batch 18): a loss the same to every digit its trainer printed for 5 logs is
frozen before the first window fills (loss_cycle.printed_frozen), unless its digits are too coarse to show a
moving loss, it sits at a guess's ln(classes), or the gradient watch is counting a zero gradient."""

from __future__ import annotations

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope

T0 = 1.7e9


def _replay(losses: list[float], **extra) -> list:
    det = LossStalledDetector()
    found = []
    for i, loss in enumerate(losses, start=1):
        data = {"rank": 0, "step": 10 * i, "loss": loss, **extra}
        found += det.observe(Envelope(ts=T0 + 60.0 * i, job="j", node="n0", source="train", kind="step", data=data))
    return found


def test_an_excerpt_frozen_at_its_printed_digits_is_found_before_a_window_fills():
    # Barber0's fp16 pretraining after an overflow: 8 logs, 54.69 at 6 of them.
    found = _replay([55.81, 54.69, 54.69, 54.69, 54.69, 54.69, 54.69, 54.75])
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "54.69 at every digit printed for 5 logs (steps 20-60)" in found[0].detail
    # A hook's full-precision loss alike 5 times says the same.
    assert len(_replay([3.0, 2.718281828459045] * 1 + [2.718281828459045] * 4)) == 1


def test_coarse_digits_a_guess_s_loss_and_a_moving_loss_are_left_to_the_window():
    # 0.0266 printed to 4 decimals: a step of 0.4 % of the level hides a loss still moving.
    assert _replay([0.031] + [0.0266] * 8) == []
    # ln 10 to 4 decimals: a uniform output scores it on every batch while its weights move.
    assert _replay([2.3031] + [2.3026] * 8, classes=10) == []
    assert _replay([2.3031, 2.3026, 2.3027, 2.3026, 2.3025, 2.3026, 2.3026, 2.3027]) == []
