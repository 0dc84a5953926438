"""Loss round 27 (issue 54, fresh batch 24): a run watched from its untrained start whose held-out loss and latest
training loss are both a tenth above where it began (and above a guess's) a window of steps on has blown up
(diagnosis/rules/loss_worse_than_start.py); either alone, or an evaluation inside the first window, says nothing."""

from __future__ import annotations

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, read_curve, replay

MEGATRON = CURVES / "fresh24" / "llama_1.3b_megatron_deepspeed_fp16_scale_collapsed_loss_10.65_to_13.4.csv"


def _run(losses: list[tuple[int, float]], held_out: float, at: int, classes: int | None = 10) -> list[str]:
    """A run from scratch logging ``losses`` (step, loss), then one evaluation at step ``at``: its findings' details."""
    events = []
    for step, loss in losses:
        data = {"rank": 0, "step": step, "loss": loss, "from_scratch": True}
        if classes:
            data["classes"] = classes
        events.append(Envelope(ts=1e9 + step, job="j", node="n0", source="train", kind="step", data=data))
    events.append(
        Envelope(
            ts=1e9 + at,
            job="j",
            node="n0",
            source="train",
            kind="eval",
            data={"rank": 0, "step": at, "metrics": {"val_loss": held_out}},
        )
    )
    return [f.detail for f in replay(events, LossStalledDetector(window_s=0.0))]


def test_the_megatron_pretraining_blown_up_with_its_loss_scale_at_1_is_found_at_its_validation():
    events, _ = read_curve(MEGATRON)
    found = replay(events, LossStalledDetector(window_s=0.0))
    assert len(found) == 1 and "worse than its start" in found[0].detail and "val_loss 13.6" in found[0].detail
    assert judge(MEGATRON).right


def test_both_losses_above_the_start_a_window_on_is_worse_than_the_start():
    rising = [(1, 2.31), (2, 2.30), (3, 2.30), (500, 2.9), (501, 3.1), (502, 2.95)]
    assert ["worse than its start" in d for d in _run(rising, 3.2, 502)] == [True]


def test_an_over_fitted_classifier_a_spike_and_an_early_evaluation_are_not():
    learned = [(1, 2.31), (2, 2.1), (3, 1.5), (500, 0.05), (501, 0.04), (502, 0.06)]
    assert _run(learned, 3.2, 502) == []  # held-out loss up, training loss far below: over-fitted
    spiked = [(1, 2.31), (2, 2.1), (3, 1.5), (500, 1.2), (501, 1.1), (502, 3.4)]
    assert _run(spiked, 1.3, 502) == []  # one batch's spike, the held-out loss below the start
    early = [(1, 2.31), (2, 3.0), (3, 3.1)]
    assert _run(early, 3.2, 3) == []  # inside the first window: the init still settling
    at_guess = [(1, 2.0), (2, 2.0), (3, 2.0), (500, 2.35), (501, 2.36), (502, 2.36)]
    assert _run(at_guess, 2.4, 502) == []  # a tenth above its start, but at ln 10 = 2.30, not a tenth above it
