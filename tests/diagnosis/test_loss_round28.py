"""Loss round 28 (issue 54, fresh batch 25): a run that learned far below a guess's loss and is back within a tenth of
it at 10 logs in a row has collapsed (loss_chance.collapsed); a run whose held-out loss stays a tenth above its first
evaluation at every one since, beside a training loss above its first at every log since, is worse than where it was
first seen (loss_worse_than_start.worse_than_first_seen). A spike back to a guess, a plateau at chance, an over-fitted
fine-tune and a held-out loss rising while an accuracy improves are none of these."""

from __future__ import annotations

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, read_curve, replay

SVHN = CURVES / "fresh25" / "nas_child_cnn_svhn_learns_to_0.73_then_collapses_to_ln10_at_step_4800.csv"
WHISPER = CURVES / "fresh25" / "whisper_small_hindi_to_braj_lr3e-3_wer_90_to_97_eval_loss_above_its_first.csv"


def _step(step: int, loss: float, classes: int | None = None) -> Envelope:
    data = {"rank": 0, "step": step, "loss": loss, **({"classes": classes} if classes else {})}
    return Envelope(ts=1e9 + step, job="j", node="n0", source="train", kind="step", data=data)


def _eval(step: int, metrics: dict[str, float]) -> Envelope:
    return Envelope(
        ts=1e9 + step, job="j", node="n0", source="train", kind="eval", data={"rank": 0, "step": step, "metrics": metrics}
    )


def _details(events: list[Envelope]) -> list[str]:
    return [f.detail for f in replay(events, LossStalledDetector(window_s=0.0))]


def test_the_svhn_child_cnn_collapsed_to_ln_10_is_found_at_its_tenth_log_there():
    events, _ = read_curve(SVHN)
    found = replay(events, LossStalledDetector(window_s=0.0))
    assert len(found) == 1 and "collapsed to a uniform guess" in found[0].detail and "step 5700" in found[0].detail
    assert judge(SVHN).right


def test_back_at_a_guess_for_fewer_logs_or_never_below_half_of_it_is_no_collapse():
    learned = [_step(s, 0.8, 10) for s in range(1, 9)]
    spike = [_step(s, 2.25, 10) for s in range(9, 18)]  # 9 logs at ln 10, then learning again
    assert _details(learned + spike + [_step(18, 0.8, 10)]) == []
    assert ["collapsed" in d for d in _details(learned + spike + [_step(18, 2.2, 10)])] == [True]
    # A plateau at chance never below half of it (1.2 against ln 10 = 2.30) is the window's to judge, not a collapse.
    halfway = [_step(s, 1.2, 10) for s in range(1, 9)] + [_step(s, 2.25, 10) for s in range(9, 19)]
    assert not any("collapsed" in d for d in _details(halfway))


def test_the_whisper_fine_tune_ruined_at_lr_3e_3_is_found_at_its_evaluations():
    events, _ = read_curve(WHISPER)
    found = replay(events, LossStalledDetector(window_s=0.0))
    assert len(found) == 1 and "worse than where it was first seen" in found[0].detail
    assert "held-out val_loss 3.195-4.457 at each of 7 evaluations to step 1056" in found[0].detail
    assert judge(WHISPER).right


def _fine_tune(train: list[float], held: list[float], accuracy: list[float] | None = None) -> list[str]:
    """A fine-tune evaluated every 10 steps (``held``, and ``accuracy`` beside it), a training loss logged every 20."""
    events = []
    for i, value in enumerate(held):
        if i % 2 == 0 and i // 2 < len(train):
            events.append(_step(10 * i + 1, train[i // 2]))
        metrics = {"val_loss": value, **({"val_accuracy": accuracy[i]} if accuracy else {})}
        events.append(_eval(10 * i + 5, metrics))
    return _details(events)


def test_held_out_and_training_loss_above_their_firsts_at_every_evaluation_is_worse_than_first_seen():
    held = [2.5, 3.2, 3.5, 3.1, 3.6, 3.4, 3.3]
    assert ["worse than where it was first seen" in d for d in _fine_tune([1.2, 2.0, 2.1, 1.9], held)] == [True]


def test_over_fitting_a_warm_up_rise_and_a_better_accuracy_are_not():
    held = [2.5, 3.2, 3.5, 3.1, 3.6, 3.4, 3.3]
    assert _fine_tune([1.2, 0.8, 0.5, 0.3], held) == []  # training loss falls: over-fitting
    assert _fine_tune([1.2, 2.0, 1.1, 1.3], held) == []  # training loss back below its first once
    assert _fine_tune([1.2, 2.0, 2.1, 1.9], [2.5, 3.2, 3.5, 2.4, 3.6, 3.4, 3.3]) == []  # held out back below its first
    assert _fine_tune([1.2, 2.0, 2.1, 1.9], held[:5]) == []  # 4 evaluations since the first: too few
    better = [0.60, 0.62, 0.65, 0.66, 0.70, 0.71, 0.72]
    assert _fine_tune([1.2, 2.0, 2.1, 1.9], held, better) == []  # an accuracy better than its first
