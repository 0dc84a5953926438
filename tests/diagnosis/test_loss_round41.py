"""Loss round 41 (issue 54, fresh batch 38): two general readings the batch's stalled curves lacked.

* A loss running away from zero by orders of magnitude, whichever its sign: 3 logs of one sign, each twice as far
  from zero as the one before or more, the latest a hundred times the first of them (loss_diverging.running_away; a
  CTC recogniser's loss at -2.6e10, -1.4e12, -1.2e13). A loss that may go below zero is no floor for a divergence:
  worse is higher, and ever farther from any level the objective reaches is arithmetic come apart.
* A climb through a window that joins two excerpts of a run (the steps jump by more than all the others together):
  steady when the later excerpt goes on climbing by itself, and judged against what the run is evaluated on since the
  later excerpt began (loss_diverging.climb_from; a Keras CNN's epochs 39-49 at 0.77, then 174-184 rising 1.09-1.17).

Each is written here as a curve; the near misses beside each stay quiet."""

from __future__ import annotations

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import evaluation, replay, step

FRESH38 = CURVES / "fresh38"
FOUND = [
    "captcha_ctc_tf_issue_loss_-2.6e10_to_-1.2e13_in_3_steps_same_prediction_for_every_image.csv",
    "keras_cnn_issue_epochs_39_to_49_loss_0.77_then_174_to_184_rising_1.08_to_1.17_val_acc_0.79_to_0.62.csv",
]


@pytest.mark.parametrize("how", [{}, {"window_s": 0.0}], ids=["own-window", "shortest-window"])
@pytest.mark.parametrize("name", FOUND)
def test_the_two_fresh38_stalls_are_found(name, how):
    outcome = judge(FRESH38 / name, **how)
    assert outcome.right and outcome.faults == ("loss_stalled",)


def _steps(losses: list[float], **more) -> list:
    return [step(i, loss, **more) for i, loss in enumerate(losses)]


# -- a loss running away from zero, either sign -----------------------------------------------------------------------

@pytest.mark.parametrize("losses", [
    [-2.6e10, -1.4e12, -1.2e13],  # below zero, where no loss should go
    [-0.8, -3.1, -6.0, -95.0, -4.1e3],  # a likelihood that had been learning, then away
    [3.1, 450.0, 5.2e4],  # above zero, in fewer logs than blown_up's five
])
def test_a_loss_running_away_from_zero_is_found_whichever_its_sign(losses):
    found = replay(_steps(losses))
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "running away" in found[0].detail and f"step {len(losses) - 1}" in found[0].detail


@pytest.mark.parametrize("losses", [
    [-2.0, -5.0, -150.0],  # 75 times: short of a hundred
    [-1e-4, -0.05, -0.9],  # from near zero: no level a fold measures
    [-1e3, -1e5, -9e4],  # the latest nearer zero than the one before
    [-1.0, 20.0, -3000.0],  # changing sign: a surrogate's swing, not one way out
    [-5e6, -1e3, -1e4, -2e5],  # back out to where it had been
    [1.26, 1.30, 1.306, 1.32, 34023.79],  # one jump after a level: a spike's shape until it holds
    [-3.0, -4.5, -6.0, -400.0],  # the same: a level, then one jump
    [-2.0, -5.1, -8.3, -10.2, -11.0, -11.6, -12.1],  # a negative SI-SNR learning
])
def test_a_loss_that_does_not_run_away_by_orders_of_magnitude_stays_quiet(losses):
    assert not any("running away" in f.detail for f in replay(_steps(losses)))


# -- a climb across two excerpts of one run ---------------------------------------------------------------------------

EARLY = [0.7744, 0.7758, 0.7737, 0.7729, 0.7743, 0.7655, 0.7670, 0.7712, 0.7676, 0.7610, 0.7657]
WIGGLE = [0.0, -0.005, 0.012, 0.004, 0.009, -0.004, 0.002, 0.006, 0.010, 0.001, 0.012]


def _two_excerpts(later: list[float], held_early: list[float] | None = None,
                  held_later: list[float] | None = None) -> list:
    """Epochs 39-49 at ``EARLY``, then 174-184 at ``later``; a held-out loss at each epoch where given."""
    events = []
    for steps, losses, held in ((range(39, 50), EARLY, held_early), (range(174, 185), later, held_later)):
        for k, (at, loss) in enumerate(zip(steps, losses, strict=True)):
            events.append(step(at, loss))
            if held is not None:
                events.append(evaluation(at, {"val_loss": held[k]}))
    return events


RISING = [1.09 + 0.008 * k + w for k, w in enumerate(WIGGLE)]
HELD_EARLY = [0.667, 0.660, 0.683, 0.643, 0.687, 0.634, 0.637, 0.658, 0.678, 0.645, 0.650]


def test_a_later_excerpt_climbing_above_the_earlier_one_is_diverging():
    found = replay(_two_excerpts(RISING))
    assert [f.fault for f in found] == ["loss_stalled"] and "diverging" in found[0].detail


def test_held_out_losses_better_in_the_earlier_excerpt_do_not_hold_the_climb_back():
    # the earlier excerpt's evaluations reached their best there (0.634 at its 6th); since the climb's excerpt began
    # every evaluation is worse than that
    held_later = [0.92, 0.86, 1.02, 0.94, 0.92, 1.17, 1.07, 1.00, 1.21, 1.06, 1.10]
    found = replay(_two_excerpts(RISING, HELD_EARLY, held_later))
    assert [f.fault for f in found] == ["loss_stalled"] and "diverging" in found[0].detail


@pytest.mark.parametrize("later", [
    [1.12 + w for w in WIGGLE],  # a new level, held: a step between the excerpts, not a climb
    list(reversed(RISING)),  # higher, and learning again
], ids=["held", "falling"])
def test_a_later_excerpt_that_holds_or_falls_is_no_divergence(later):
    assert not any("diverging" in f.detail for f in replay(_two_excerpts(later)))


def test_a_climb_while_the_later_excerpt_is_evaluated_better_than_ever_is_no_divergence():
    held_later = [0.630 - 0.004 * k for k in range(11)]  # a new best at every evaluation of the later excerpt
    assert not any("diverging" in f.detail for f in replay(_two_excerpts(RISING, HELD_EARLY, held_later)))
