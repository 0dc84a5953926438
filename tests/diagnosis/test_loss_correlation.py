"""A held-out correlation at chance (issue 54, fresh batch 11): a regressor that predicts its target's
mean has an MSE at the target's variance, a level no event states, and a Spearman (or Pearson)
correlation of 0 with the target, which the metric's name says is its chance, with higher better."""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope
from faultlens.events.payloads_job import TrainEval
from faultlens.trainer_hooks.callback_support import eval_chance

T0 = 1.7e9


def _run(rho) -> list:
    """A regressor's MSE around 1.0 (a standardised target's variance), evaluated every 50 steps: its
    eval_loss and ``rho(k)`` as eval_spearman_rho at the k-th, each with the chance the callbacks fill."""
    det = LossStalledDetector()
    found = []
    for i in range(1, 501):
        wiggle = 2 * ((math.sin(i * 12.9898) * 43758.5453) % 1.0) - 1  # batch-to-batch noise, never repeating
        data = {"rank": 0, "step": i, "loss": 1.0 + 0.1 * wiggle}
        found += det.observe(Envelope(ts=T0 + 10.0 * i, job="j", node="n0", source="train", kind="step", data=data))
        if i % 50 == 0:
            metrics = {"eval_loss": 0.991, "eval_spearman_rho": rho(i // 50)}
            ev = {"rank": 0, "step": i, "metrics": metrics, "chance": eval_chance(metrics, None, None, None)}
            found += det.observe(Envelope(ts=T0 + 10.0 * i + 1, job="j", node="n0", source="train", kind="eval", data=ev))
    return found


def test_a_correlation_s_name_says_higher_is_better_and_chance_is_zero():
    for name in ("eval_spearman_rho", "val_spearman", "val_pearson_r", "kendall_tau", "val_correlation"):
        assert TrainEval.direction(name) is True, name
    # A class count or none: predictions that ignore the input do not vary with the target.
    assert eval_chance({"eval_spearman_rho": 0.01, "eval_loss": 0.99}, None, None, None) == {"eval_spearman_rho": 0.0}
    assert eval_chance({"val_pearson_r": 0.2}, 10, None, None) == {"val_pearson_r": 0.0}
    assert TrainEval.direction("eval_runtime") is None and TrainEval.direction("correct_loss") is False


def test_a_regressor_predicting_the_mean_is_found_by_its_held_out_correlation():
    # ChromaGuide's CRISPR regressor: eval Spearman -0.013 to 0.011 at every epoch, MSE at 1.0 throughout.
    found = _run(lambda k: 0.01 if k % 2 else -0.01)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "held-out eval_spearman_rho -0.01-0.01 (chance 0)" in found[0].detail, found[0].detail
    # One that learns to rank its targets leaves chance (0.1 of the way to 1) at its second evaluation.
    assert _run(lambda k: 0.3 * k) == []
