"""At the class prior the trainer states (``chance_loss`` on the step): a classifier whose loss sits at the
entropy of its labels' distribution answers every input with that distribution and has learned nothing of
the input, though its loss is well below ln(classes) when the labels are uneven (issue 54, fresh batch 6:
an LSTM on TIMIT frames 9 % below ln 1947, its accuracy the commonest state's share). Without the word no
level tells it; with it, a run that passes the prior on its way down stays quiet."""

from __future__ import annotations

import math

import pytest

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainStep
from faultlens.trainer_hooks.callback_support import label_prior_loss

# Ten classes, one of them 70 % of the labels: the prior's entropy is 1.27 nats against ln 10 = 2.30.
SHARES = (0.7,) + (0.3 / 9,) * 9
PRIOR = -sum(p * math.log(p) for p in SHARES)


def noise(i: int) -> float:
    """A deterministic wiggle in [-1, 1)."""
    return 2 * ((math.sin(i * 12.9898) * 43758.5453) % 1.0) - 1


def to_prior(i: int) -> float:
    """From a guess (ln 10) to the prior within 30 steps, then there, one batch's noise each."""
    return max(PRIOR, math.log(10) - (math.log(10) - PRIOR) * i / 30) * (1 + 0.02 * noise(i))


def through_prior(i: int) -> float:
    """The same start, on down past the prior to 0.3: learning."""
    return (0.3 + (math.log(10) - 0.3) * math.exp(-i / 150)) * (1 + 0.02 * noise(i))


def replay(loss, chance_loss: float | None, n: int = 600) -> list:
    det = LossStalledDetector()
    found = []
    for i in range(n):
        data: dict = {"rank": 0, "step": i, "loss": loss(i)}
        if chance_loss is not None:
            data["chance_loss"] = chance_loss
        found += det.observe(Envelope(ts=1.7e9 + 10.0 * i, job="j", node="n0", source="train", kind="step", data=data))
    return found


def test_a_classifier_at_its_class_prior_is_stalled_when_the_trainer_states_the_prior():
    found = replay(to_prior, PRIOR)
    assert found and {f.fault for f in found} == {"loss_stalled"} and found[0].action == "alert"
    assert "labels' distribution" in found[0].detail
    # Found at its first whole window (120 steps at 10 s): most of the run still ahead.
    assert int(found[0].detail.rsplit("step ", 1)[1].rstrip(")")) <= 150, found[0].detail


def test_without_the_prior_nothing_tells_it():
    # 49 % below its first loss and flat: by its curve a run that learned and converged.
    assert replay(to_prior, None) == []


def test_a_run_that_passes_the_prior_on_its_way_down_is_quiet():
    assert replay(through_prior, PRIOR) == []


def test_the_prior_is_the_labels_entropy_and_nothing_for_what_is_not_a_label():
    assert label_prior_loss([0, 1, 2, 3] * 5, 4) == pytest.approx(math.log(4))
    assert label_prior_loss([0] * 7 + [1] * 3, 2) == pytest.approx(-(0.7 * math.log(0.7) + 0.3 * math.log(0.3)))
    import numpy as np

    assert label_prior_loss(np.array([0, 0, 1, 1]), 2) == pytest.approx(math.log(2))
    # A padding label, a regression target, a multi-label row, a bool, no labels, no class count: none.
    for labels, classes in (
        ([0, 1, -100], 2),
        ([0.5, 1.5], 2),
        ([[0, 1]], 2),
        ([True, False], 2),
        ([], 3),
        ([0, 1], None),
        ([0, 5], 3),
        (7, 3),
    ):
        assert label_prior_loss(labels, classes) is None, labels


def test_the_step_carries_a_prior_that_is_a_number_at_least_zero():
    def step(value) -> Envelope:
        return Envelope(
            ts=1.7e9,
            job="j",
            node="n0",
            source="train",
            kind="step",
            data={"rank": 0, "step": 1, "loss": 1.0, "chance_loss": value},
        )

    assert typed(step(1.18), TrainStep).chance_loss == pytest.approx(1.18)
    with pytest.raises(InvalidEvent):
        typed(step(-1.0), TrainStep)
