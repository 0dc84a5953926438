"""Loss round 22 (issue 54, fresh batch 19): a training loss back up from its best to no more than the held-out
loss the run scored while it was there has lost no learning, only the fit of its own batches beyond what held out
(loss_eval.HeldOutWatch.fit_only); a DPO loss whose trainer states ln 2, a policy preferring neither answer, is
judged at chance like any other."""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from tests.diagnosis.test_loss_what_the_run_says import evaluation, noise, step


def _replay(events, detector: LossStalledDetector) -> list:
    return [f for e in events for f in detector.observe(e)]


def _easy_stretch(val_loss: float | None, back: float = 0.45) -> list:
    """A pretraining run first seen mid-way at 0.5 (5 % noise), a stretch of 200 steps at 0.25, then ``back``
    for 400; its val loss ``val_loss`` every 50 steps (none where None)."""
    events = []
    for i in range(1, 801):
        level = 0.5 if i <= 200 else 0.25 if i <= 400 else back
        if val_loss is not None and i % 50 == 0:
            events.append(evaluation(i, {"val_loss": val_loss * (1 + 0.03 * noise(i + 3))}))
        events.append(step(i, level * (1 + 0.05 * noise(i))))
    return events


def test_a_training_loss_back_up_to_its_held_out_loss_has_lost_nothing():
    # fresh19's solGPT seen from its middle: 0.24-0.29 over iterations 12,000-12,600 against a val loss of
    # 0.54-0.59, then 0.42-0.52 with the val loss where it was.
    assert _replay(_easy_stretch(0.55), LossStalledDetector(window_s=0.0)) == []


def test_without_a_held_out_loss_or_above_it_the_same_rise_is_a_regression():
    for events in (_easy_stretch(None), _easy_stretch(0.4), _easy_stretch(0.55, back=0.7)):
        found = _replay(events, LossStalledDetector(window_s=0.0))
        assert any("stays above the" in f.detail for f in found), found[:1]


def _dpo(level, chance: float | None = math.log(2)) -> list:
    """A DPO run's per-update loss ``level(i)`` (4 % noise) over 300 updates, its trainer stating ``chance``."""
    more = {"chance_loss": chance} if chance is not None else {}
    return [step(i, level(i) * (1 + 0.04 * noise(i)), **more) for i in range(1, 301)]


def test_a_dpo_loss_held_at_ln_2_is_found_when_its_trainer_states_it_and_one_leaving_it_is_not():
    # fresh19's Gemma-2-2B DPO, which never moved off its reference (ln 2 / 5 as its script prints it), and
    # its twin after the author's bug fix, leaving it within 20 updates.
    found = _replay(_dpo(lambda i: math.log(2)), LossStalledDetector())
    assert [f.fault for f in found] == ["loss_stalled"] and "0.6931" in found[0].detail, found
    assert _replay(_dpo(lambda i: math.log(2) * max(0.65, 1 - 0.004 * i)), LossStalledDetector()) == []
    # Unstated, a fine-tune's flat loss from its start says nothing (a trained model may start at its floor).
    assert _replay(_dpo(lambda i: math.log(2), chance=None), LossStalledDetector()) == []
