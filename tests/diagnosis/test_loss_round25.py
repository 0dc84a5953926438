"""Loss round 25 (issue 54, fresh batch 22): a trained model's loss at a uniform guess's, the same to every digit
printed for five logs, has lost what it knew (loss_cycle.printed_frozen), while a model from random weights at chance
stays the window's to judge; a loss above a guess's climbing steadily through the window is stuck above chance
whatever blow-up it came down from (loss_chance.at_chance), while one that spikes and comes back stays quiet; and the
harness replays a run whose every step takes minutes at its own pace."""

from __future__ import annotations

import itertools
import math

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, read_curve
from tests.diagnosis.test_loss_what_the_run_says import noise, replay, step

FRESH22 = CURVES / "fresh22"
MINIGPT4 = FRESH22 / "minigpt4_vicuna_stage2_finetune_frozen_at_10.375_ln32000.csv"
GPT_52B = FRESH22 / "bigscience_gpt_52b_fp16_loss_scale_12_blown_up_then_climbing.csv"
GPT_40_LAYERS = FRESH22 / "bigscience_gpt_40_layers_fp16_from_scratch_spike_to_22_then_learning.csv"


def test_a_fine_tune_at_ln_32000_to_every_digit_printed_is_found_at_its_fifth_log():
    events, _ = read_curve(MINIGPT4)
    # Its rate said at each log, 2.9e-05 (the optimizer at its peak): found at its third since loss round 35
    # (loss_cycle._stepping); without the rate, at its fifth, as in round 25.
    found = replay(events)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "10.375 at every digit printed for 3 logs (steps 3950-4050), a uniform guess's ln(32000)" in found[0].detail
    events, _ = read_curve(MINIGPT4)  # afresh: an event's payload is read once
    for e in events:
        e.data.pop("lr", None)
    found = replay(events)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "10.375 at every digit printed for 5 logs (steps 3950-4150), a uniform guess's ln(32000)" in found[0].detail
    assert judge(MINIGPT4).right


def test_a_loss_repeated_at_a_guess_s_is_found_only_where_the_trainer_says_the_model_was_trained():
    guess = round(math.log(10), 4)  # 2.3026, as a trainer prints it
    assert [f.fault for f in replay([step(i, guess, classes=10, from_scratch=False) for i in range(1, 11)])] == ["loss_stalled"]
    # From random weights (fresh4's AdaGrad at 2.3026 for 19 logs, then learning), or unsaid: the window's to judge.
    assert replay([step(i, guess, classes=10, from_scratch=True) for i in range(1, 11)]) == []
    assert replay([step(i, guess, classes=10) for i in range(1, 11)]) == []


def _blown_up(then: float) -> list:
    """A 50,257-way LM from random weights: 12.4, blown up to 48 at step 4, down to 11.7 by step 31, then ``then``
    a step with a little noise to step 62."""
    losses = [12.44, 12.45, 44.2, *(48.0 - 36.3 * k / 27 for k in range(28))]
    losses += [losses[-1] + then * k * (1 + 0.02 * noise(k)) for k in range(1, 32)]
    return [step(i, v, classes=50257, from_scratch=True) for i, v in enumerate(losses, start=1)]


def test_a_loss_above_a_guess_climbing_after_a_blow_up_is_found_and_one_falling_below_it_is_not():
    found = replay(_blown_up(0.3))
    assert [f.fault for f in found] == ["loss_stalled"] and "above chance, ln(50257)" in found[0].detail
    assert replay(_blown_up(-0.05)) == []


def test_the_52b_gpt_is_found_with_a_quarter_of_its_log_left_and_the_40_layer_spike_stays_quiet():
    outcome = judge(GPT_52B)
    assert outcome.right and outcome.at is not None and outcome.at <= 0.75
    for how in ({}, {"start": 0.5}, {"start": 0.5, "renumber": True}, {"window_s": 0.0}):
        assert judge(GPT_40_LAYERS, **how).right


def test_a_run_whose_every_step_takes_minutes_is_replayed_at_its_own_pace():
    # 123-145 s an iteration: not a start-up or an evaluation's time, which the first row's and nanoGPT's every
    # 250th iteration's are (90 s among 0.03 s ones, replayed at 1 s a step).
    events, _ = read_curve(GPT_52B)
    gaps = [b.ts - a.ts for a, b in itertools.pairwise(events)]
    assert 120 < min(gaps[1:]) and max(gaps) < 150
    events, _ = read_curve("nanogpt_shakespeare_char.log")
    assert max(b.ts - a.ts for a, b in itertools.pairwise(events)) < 60
