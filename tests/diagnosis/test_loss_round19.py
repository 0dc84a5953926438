"""What a person reads beside a loss's shape (issue 54, fresh batch 16; diagnosis/rules/loss_diverging.py,
loss_stalled.py, loss_eval.HeldOutWatch.better_since): single batches scattered over orders of magnitude are
no climb past a level by a hair, and a loss above its best while the run is evaluated better than it was
there has lost nothing."""

from __future__ import annotations

from tests.diagnosis.test_loss_what_the_run_says import evaluation, noise, replay, step


def scattered(seed: int) -> list:
    """600 single-batch losses of one level, each 10^-3..1 of 0.05 (log-uniform), no trend: the DQN's TD loss
    log to log. Round 18's rule called some such series diverging (these three seeds; 8 of 60 tried), a later
    half-window's median past the highest window median by a hair; 5 of the 60 still are (seeds 5, 10, 29,
    45, 51: a longer streak of high batches), what a short window of single batches cannot tell apart."""
    return [step(i, 0.05 * 10 ** (1.5 * noise(i + 1000 * seed) - 1.5)) for i in range(600)]


def test_single_batches_scattered_over_decades_do_not_diverge_by_passing_a_level_by_a_hair():
    for seed in (33, 40, 49):
        assert not [f for f in replay(scattered(seed)) if "diverging" in f.detail], seed


def test_a_loss_that_climbs_far_past_every_level_it_showed_still_diverges():
    events = [step(i, 1.0 + 0.05 * noise(i)) for i in range(200)]
    events += [step(200 + i, (1.0 + 0.1 * i) * (1 + 0.05 * noise(i + 9))) for i in range(60)]
    found = replay(events)
    assert found and "diverging" in found[0].detail


def ppo(returns) -> list:
    """A loss down from 1.0 to 0.2 in 20 updates, there for 40, then back to about 0.6 for 160 (a PPO's total
    loss as its value term grows), one evaluation of the agent's return after each update, higher is better."""
    events = []
    for i in range(220):
        loss = 1.0 - 0.04 * i if i < 20 else 0.2 if i < 60 else 0.6
        events.append(step(i, loss * (1 + 0.1 * noise(i))))
        events.append(evaluation(i, {"return": returns(i)}, higher_is_better={"return": True}))
    return events


def test_a_loss_above_its_best_while_the_return_is_better_than_it_was_there_is_quiet():
    assert replay(ppo(lambda i: -8 + 0.5 * i + 2 * noise(i + 3))) == []


def test_a_loss_above_its_best_while_the_return_is_worse_than_it_was_there_regressed():
    found = replay(ppo(lambda i: (-8 + 0.5 * i) if i < 60 else (22 - 0.2 * (i - 60)) + noise(i + 3)))
    assert found and "losing" in found[0].detail
