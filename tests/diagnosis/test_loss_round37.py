"""Loss round 37 (issue 54, fresh batch 34): a run that left a uniform guess's loss after its first log and came back to
it to every printed digit has lost what it learned, whatever its start (loss_cycle.printed_frozen,
loss_cycle._left_the_guess): fresh batch 34's Network-in-Network on CIFAR-10 from scratch, 2.303, 2.290, 2.234, then
2.302585 = ln 10 at every line of epochs 2-4. A run from random weights that never left the guess is still the
untrained model (fresh batch 4's AdaGrad, a strict xfail for its window's judgement, not for this reading)."""

from __future__ import annotations

import math

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import replay, step

NIN = CURVES / "fresh34" / ("nin_cifar10_pytorch_loss_frozen_at_2.302585_ln10_from_epoch_2_test_acc_10.00_percent"
                            "_every_epoch.csv")
GUESS = round(math.log(10), 6)  # 2.302585, as a six-decimal print shows it


@pytest.mark.parametrize("how", [{}, {"window_s": 0.0}])
def test_the_nin_back_at_ln_10_after_leaving_it_is_found_at_its_third_log_alike(how):
    outcome = judge(NIN, **how)
    assert outcome.right and outcome.faults == ("loss_stalled",)


def _curve(before: list[float], alike: int, rate: float | None = 0.1, **said) -> list:
    losses = before + [GUESS] * alike
    return replay([step(i, v, classes=10, **({"lr": rate} if rate is not None else {}), **said)
                   for i, v in enumerate(losses, 1)])


def test_back_at_a_guess_after_a_log_a_fiftieth_below_it_is_frozen_whatever_the_start():
    for said in ({"from_scratch": True}, {}):
        found = _curve([2.3034, 2.2898, 2.2340], 3, **said)
        assert [f.fault for f in found] == ["loss_stalled"], said
        assert "a uniform guess's ln(10) after the run was down at 2.234" in found[0].detail
        assert "(steps 4-6)" in found[0].detail


def test_without_a_rate_it_takes_the_five_logs_of_printed_frozen():
    assert _curve([2.3034, 2.2898, 2.2340], 4, rate=None, from_scratch=True) == []
    found = _curve([2.3034, 2.2898, 2.2340], 5, rate=None, from_scratch=True)
    assert [f.fault for f in found] == ["loss_stalled"]


def test_a_run_from_random_weights_that_never_left_the_guess_stays_the_untrained_model():
    # The AdaGrad shape: its first log above the guess, then the guess at every digit while its weights move.
    assert _curve([2.3114], 12, from_scratch=True) == []
    # Within a fiftieth of the guess is no departure: a random model's batches score about it.
    assert _curve([2.3034, 2.2800, 2.2950], 12, from_scratch=True) == []
    # A first log below the guess is the random model the run was first seen as, its batch lucky.
    assert _curve([2.2340, 2.3050], 12, from_scratch=True) == []


def test_a_run_that_left_the_guess_and_moves_around_it_is_not_frozen():
    # Back near the guess but never the same to every digit: the window's to judge, not a frozen print.
    losses = [2.3034, 2.2898, 2.2340] + [GUESS + 1e-4 * ((-1) ** i) * (1 + i % 3) for i in range(12)]
    assert replay([step(i, v, classes=10, lr=0.1, from_scratch=True) for i, v in enumerate(losses, 1)]) == []
