"""Learned a little, then stopped (diagnosis/rules/loss_plateau.py): a run watched from its start whose
loss fell a small share of its first value, then did not move for many times as long as that fall took,
is stalled at a level no step event carries (a class prior, a data variance: issue 54, fresh batch 6).
A run that learned most of its first loss away, whose plateau is short beside its fall, whose schedule
decayed, or that was first seen mid-way stays quiet."""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope


def noise(i: int) -> float:
    """A deterministic wiggle in [-1, 1): a curve's batch-to-batch noise."""
    return 2 * ((math.sin(i * 12.9898) * 43758.5453) % 1.0) - 1


def fall_then_flat(share: float, fall_steps: int = 20, scale: float = 1.0):
    """A loss that falls ``share`` of its first value over ``fall_steps`` steps, then sits flat with
    0.2 % noise (a VAE's reconstruction at its data's variance after its first epochs)."""

    def loss(i: int) -> float:
        done = min(1.0, i / fall_steps)
        return scale * (1 - share * done) * (1 + 0.002 * noise(i))

    return loss


def replay(loss, n: int = 600, first: int = 0, lr=None, window_s: float = 0.0) -> list:
    det = LossStalledDetector(window_s)
    found = []
    for i in range(first, first + n):
        data = {"rank": 0, "step": i, "loss": loss(i)}
        if lr is not None:
            data["lr"] = lr(i)
        found += det.observe(Envelope(ts=1.7e9 + 10.0 * i, job="j", node="n0", source="train", kind="step", data=data))
    return found


def test_a_run_that_fell_a_tenth_then_sat_flat_for_long_is_stalled():
    found = replay(fall_then_flat(0.1), n=600)
    assert found and found[0].fault == "loss_stalled" and found[0].action == "alert"
    assert "learned a little, then stopped" in found[0].detail
    # Found once the plateau has lasted five times its fall (20 steps): by step 20 + 100 and two windows.
    step = int(found[0].detail.rsplit("step ", 1)[1].rstrip(")"))
    assert step <= 200, found[0].detail


def test_at_any_scale_a_variance_or_a_reconstruction_error():
    # An MSE of 4,400 or of 1e-3: the share of its first loss, not its level, is what counts.
    for scale in (4400.0, 1e-3):
        found = replay(fall_then_flat(0.1, scale=scale), n=600)
        assert found and "learned a little" in found[0].detail, scale


def test_a_run_that_learned_most_of_its_first_loss_away_and_converged_is_quiet():
    assert replay(fall_then_flat(0.6), n=600) == []


def test_a_plateau_short_beside_the_fall_before_it_is_quiet():
    # 200 steps of fall, 300 of plateau: 1.5x, not yet the 5x a person waits for.
    assert replay(fall_then_flat(0.1, fall_steps=200), n=500) == []


def test_a_plateau_with_a_decayed_learning_rate_is_the_schedules():
    def lr(i: int) -> float:
        return 1e-3 * 0.5 * (1 + math.cos(math.pi * min(1.0, i / 100)))  # cosine to zero by step 100

    assert replay(fall_then_flat(0.1), n=600, lr=lr) == []
    # ...and one still at its peak is judged as without it.
    assert replay(fall_then_flat(0.1), n=600, lr=lambda i: 1e-3)


def test_a_run_first_seen_mid_way_is_not_judged_by_it():
    # The same curve from step 5,000 on: what fell before it was seen is unknown.
    shifted = fall_then_flat(0.1)
    assert replay(lambda i: shifted(i - 5000), n=600, first=5000) == []


def test_a_resumed_run_flat_from_its_first_loss_is_quiet():
    # A hook counting from 1 again on a converged run: no fall from its first loss beyond its noise.
    assert replay(fall_then_flat(0.0), n=600) == []


def _with_evals(loss, held_out, every: int = 30, n: int = 600) -> list:
    """The curve's steps with a held-out evaluation every ``every`` steps: its loss ``held_out(k)`` at the
    k-th, no chance given (a level nothing states, as the plateau's)."""
    det = LossStalledDetector(0.0)
    found = []
    for i in range(n):
        data = {"rank": 0, "step": i, "loss": loss(i)}
        found += det.observe(Envelope(ts=1.7e9 + 10.0 * i, job="j", node="n0", source="train", kind="step", data=data))
        if i % every == every - 1:
            ev = {"rank": 0, "step": i, "metrics": {"val_loss": held_out(i // every)}}
            found += det.observe(Envelope(ts=1.7e9 + 10.0 * i + 1, job="j", node="n0", source="train", kind="eval", data=ev))
    return found


def test_a_plateau_whose_held_out_loss_still_falls_is_a_model_still_learning():
    # Issue 54's fresh batch 14: a softmax fed to cross-entropy levels off near the floor that pairing has
    # (2.44 over 28 classes, fell 24 % of its first) while its val_loss falls at each of 30 epochs.
    assert _with_evals(fall_then_flat(0.1), lambda k: 2.5 * (1 - 0.01 * (1 - 0.9**k))) == []
    # A held-out loss that sits (a stall's: fresh batch 13's autoencoder at 1.5277 every epoch) is no answer:
    # found once five evaluations say it stopped (step 149), where without evaluations it is at 120.
    flat = _with_evals(fall_then_flat(0.1), lambda k: 1.5277 + 1e-5 * noise(k))
    assert flat and "learned a little, then stopped" in flat[0].detail
    assert int(flat[0].detail.rsplit("step ", 1)[1].rstrip(")")) >= 149, flat[0].detail
    # ...and so is one that came down and then sat for ten evaluations (its Mann-Kendall fall gone).
    assert _with_evals(fall_then_flat(0.1), lambda k: 2.5 - 0.01 * min(k, 3) + 1e-4 * noise(k), n=900)
