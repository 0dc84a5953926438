"""A loss spike needs an absolute rise as well as a ratio (issue 54): 5× the recent median, six
robust sigmas, and a tenth of the metric's scale (ln(classes), or the highest value the run has
shown); for the loss, also more than float32 can resolve of a cross-entropy (1e-5). It stands once
the next loss has not taken it back (still three robust sigmas and a tenth of the scale above the
median), as a grad-norm spike stands once the next loss answers it."""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.training import TrainingRule
from tests.diagnosis.diag_events import ev


def step(i: int, loss=2.0, grad_norm=1.0, **extra):
    return ev(i * 10.0, "n001", "train", "step", rank=0, step=i, loss=loss, grad_norm=grad_norm, **extra)


def _feed(rule: TrainingRule, losses, start: int = 0, **extra) -> list:
    return [f for i, loss in enumerate(losses, start) for f in rule.observe(step(i, loss=loss, **extra))]


def near_1e7(i: int) -> float:
    """A fine-tune's loss at float32's resolution: about one ulp of 1 - p, never zero."""
    return 1e-7 * (1 + 0.2 * (i % 3 == 0))


def test_a_fine_tune_near_1e_7_moving_to_5e_7_is_no_spike_watched_from_its_start():
    rule = TrainingRule()
    start = [0.4 * math.exp(-i / 5) for i in range(60)]  # the fine-tune from its first step: 0.4 down
    assert _feed(rule, start + [near_1e7(i) for i in range(60)]) == []
    assert _feed(rule, [5e-7], start=120) == []


def test_a_fine_tune_first_seen_at_1e_7_with_no_class_count_is_no_spike_either():
    # Nothing tells the scale here but float32: 5e-7 is four ulps of 1 - p.
    rule = TrainingRule()
    assert _feed(rule, [near_1e7(i) for i in range(60)]) == []
    assert _feed(rule, [5e-7, 6e-7], start=60) == []


def test_the_same_ratio_on_a_loss_that_matters_is_still_a_spike():
    rule = TrainingRule()
    assert _feed(rule, [2.0 + 0.01 * math.sin(i) for i in range(60)], classes=50257) == []
    [f] = _feed(rule, [11.0, 11.0], start=60, classes=50257)
    assert f.fault == "loss_spike" and "loss 11" in f.detail


def test_a_converged_runs_noise_under_a_tenth_of_a_guess_is_no_spike():
    # minGPT's adder (tests/fixtures/loss_curves/mingpt_adder_2digit.csv): 0.017 -> 0.15 between two
    # logs, 8.9x, gone at the next; ln 10 = 2.3, so the rise is 6 % of it.
    rule = TrainingRule()
    assert _feed(rule, [0.017 + 0.002 * math.sin(i) for i in range(60)], classes=10) == []
    assert _feed(rule, [0.15, 0.017], start=60, classes=10) == []
    # A rise past a tenth of ln 10 is one.
    [f] = _feed(rule, [0.4, 0.4], start=62, classes=10)
    assert f.fault == "loss_spike"


def test_a_low_loss_run_watched_from_its_start_is_measured_against_where_it_came_down_from():
    # No class count: the scale is the highest loss the rule saw, 3.0 at the start.
    rule = TrainingRule()
    falling = [3.0 * math.exp(-i / 10) + 0.01 for i in range(80)]
    assert _feed(rule, falling) == []
    assert _feed(rule, [0.2], start=80) == []  # 10x the median, 0.19 rise: 6 % of 3.0
    [f] = _feed(rule, [0.5, 0.5], start=81)  # 0.49 rise: 16 %
    assert f.fault == "loss_spike"


def test_a_grad_norm_spike_is_measured_against_the_grad_norms_own_peak():
    rule = TrainingRule()
    assert [f for i in range(60) for f in rule.observe(step(i, grad_norm=1.0 + 0.05 * (i % 3)))] == []
    assert rule.observe(step(60, grad_norm=8.0)) == []  # the loss has yet to answer
    [f] = rule.observe(step(61, loss=2.5))  # the next step's loss rises with it
    assert f.fault == "loss_spike" and "grad_norm 8 at step 60" in f.detail and "the loss rose with it" in f.detail
    # A vanished gradient wobbling at 1e-9 is no spike: its peak, 1.1, is the scale (the loss after
    # it rises, so a spike would stand).
    assert [f for i in range(62, 122) for f in rule.observe(step(i, grad_norm=1e-9 * (1 + i % 2)))] == []
    assert rule.observe(step(122, loss=2.5, grad_norm=6e-9)) == []
    assert rule.observe(step(123, loss=2.5)) == []


def _steady(rule: TrainingRule, n: int = 60) -> None:
    assert [f for i in range(n) for f in rule.observe(step(i, loss=2.0 + 0.01 * (i % 3), grad_norm=1.0 + 0.05 * (i % 3)))] == []


def test_a_grad_norm_spike_the_loss_does_not_answer_is_one_the_optimizer_absorbed():
    # Issue 54, fresh batch 1: a speculative-decoding drafter logs grad norms 5-17x their median eight
    # times in 40,000 steps while its loss keeps falling (clipping takes them).
    rule = TrainingRule()
    _steady(rule)
    assert rule.observe(step(60, grad_norm=17.5)) == []
    assert [f for i in range(61, 70) for f in rule.observe(step(i, loss=2.0 + 0.01 * (i % 3)))] == []


def test_a_grad_norm_spike_stands_when_the_loss_after_its_update_stays_up():
    # The grad norm of a step is the update it applies: its harm shows in the next step's loss.
    rule = TrainingRule()
    _steady(rule)
    assert rule.observe(step(60, loss=2.6, grad_norm=17.5)) == []
    [f] = rule.observe(step(61, loss=2.6, grad_norm=1.0))
    assert f.fault == "loss_spike" and "grad_norm 17.5 at step 60" in f.detail and len(f.evidence) == 2


def test_a_hard_batch_whose_next_loss_is_back_is_absorbed():
    # Issue 54, fresh batch 3: TrOCR's bad batches lift a 0.14 loss to 0.49 with a 12x grad norm, and
    # the next log is 0.15 again: the batch was hard, the update did no harm.
    rule = TrainingRule()
    _steady(rule)
    assert rule.observe(step(60, loss=2.6, grad_norm=17.5)) == []
    assert rule.observe(step(61, loss=2.01, grad_norm=1.0)) == []


def test_a_next_loss_up_by_its_noise_but_under_a_tenth_of_its_scale_does_not_answer():
    # A run that came down from 5.3 (the scale): a next loss 0.2 above a 2.0 median is past its noise
    # (0.01) and no rise to stop a job for.
    rule = TrainingRule()
    rule.observe(step(0, loss=5.3, grad_norm=1.0))
    _steady(rule)
    assert rule.observe(step(60, loss=2.0, grad_norm=17.5)) == []
    assert rule.observe(step(61, loss=2.2, grad_norm=1.0)) == []
    assert rule.observe(step(62, loss=2.0, grad_norm=17.5)) == []
    [f] = rule.observe(step(63, loss=2.6, grad_norm=1.0))  # 0.6 is past a tenth of 5.3
    assert f.fault == "loss_spike"


def test_a_grad_norm_spike_stands_alone_where_the_step_reports_no_loss():
    rule = TrainingRule()
    assert [f for i in range(60) for f in rule.observe(step(i, loss=None, grad_norm=1.0 + 0.05 * (i % 3)))] == []
    [f] = rule.observe(step(60, loss=None, grad_norm=8.0))
    assert f.fault == "loss_spike" and "grad_norm" in f.detail


def test_a_loss_that_changes_sign_is_a_surrogate_with_no_ratio_to_spike():
    # A GRPO run's loss (Rusheel86/Chaos-Economy's trainer_state.json): around 0, often 3e-5, at times
    # negative; 0.03 after a run of 3.5e-5 is 864x its median and no spike.
    rule = TrainingRule()
    tiny = [-0.0018, 3.5e-5, 2.9e-5, 0.0037, -0.0357, 3.6e-5, 4.5e-5, 3.2e-5, 4.0e-5, 3.9e-5, 4.0e-5, 4.6e-5]
    assert _feed(rule, tiny) == []
    assert _feed(rule, [0.0307, 0.0408], start=len(tiny)) == []


def _per_sample(i: int) -> float:
    """A per-sample MSE at batch size 1 (issue 54, fresh batch 4's crystal-graph regression): mostly
    0.01-0.1, every fourth sample a hard one at 1-3, every 23rd at 8."""
    return 8.0 if i % 23 == 11 else 1.0 + (i % 3) if i % 4 == 3 else 0.02 + 0.01 * (i % 9)


def test_a_per_sample_losss_routine_tail_is_no_spike():
    # 20-400x its median every few steps: the series' own noise, never a spike.
    rule = TrainingRule()
    assert _feed(rule, [_per_sample(i) for i in range(400)]) == []


def test_a_spike_out_of_a_series_that_never_went_that_far_still_stands():
    # The same rule on a steady loss: the first jump past 5x stands.
    rule = TrainingRule()
    assert _feed(rule, [2.0 + 0.01 * (i % 3) for i in range(60)]) == []
    [f] = _feed(rule, [12.0, 12.0], start=60)
    assert f.fault == "loss_spike" and "loss 12 at step 60" in f.detail and "the next loss stayed up" in f.detail
    # Two one-log jumps within the last 50 steps, each taken back, count as the series' excursions; a
    # series that went that far twice does so routinely, and a third in the same window is its noise,
    # even one that holds.
    rule = TrainingRule()
    steady = [2.0 + 0.01 * (i % 3) for i in range(90)]
    steady[60] = steady[75] = 12.0
    assert _feed(rule, steady) == []
    assert _feed(rule, [12.0, 12.0], start=90) == []
    # Once all four have left the window, a jump that holds stands again.
    assert _feed(rule, [2.0 + 0.01 * (i % 3) for i in range(92, 150)], start=92) == []
    [f] = _feed(rule, [12.0, 12.0], start=150)
    assert f.fault == "loss_spike"


def test_a_loss_spike_waits_for_a_window_of_the_series_own_values():
    # A binary fine-tune's per-batch loss first seen mid-way (issue 54, fresh batch 6): 14 batches around
    # 0.14 say nothing of its hard batches, and its 0.99 is one of them; the rule judges a loss against
    # its own tail once it has shown a window (50 values) of it.
    def batch(i: int) -> float:
        return 0.14 + 0.04 * math.sin(1.7 * i)

    rule = TrainingRule()
    assert _feed(rule, [batch(i) for i in range(14)] + [0.99]) == []
    # The same batch after a whole window that stayed a third below it stands.
    rule = TrainingRule()
    [f] = _feed(rule, [batch(i) for i in range(50)] + [0.99, 0.99])
    assert f.fault == "loss_spike" and "0.99" in f.detail


def test_a_batch_within_three_times_of_the_series_own_tail_is_no_spike_and_one_far_past_it_is():
    # A fine-tune's per-batch loss around 0.15 whose hard batches reach 0.62, each just under 5x the
    # median of its time (no excursion counted): a batch at 1.65 is that tail (issue 54, fresh batch 5).
    def tail(i: int) -> float:
        return 0.62 if i % 10 == 5 else 0.15 + 0.03 * math.sin(i)

    rule = TrainingRule()
    assert _feed(rule, [tail(i) for i in range(60)] + [1.65] + [tail(i) for i in range(61, 70)]) == []
    # Out of a series whose batches stayed under a third of it, the same batch is one.
    rule = TrainingRule()
    [f] = _feed(rule, [0.15 + 0.03 * math.sin(i) for i in range(60)] + [1.65, 1.65])
    assert f.fault == "loss_spike"


def test_a_loss_spike_the_next_loss_takes_back_is_one_the_run_absorbed():
    # An LSTM memorising event-MNIST (tests/fixtures/loss_curves/fresh6/lstm_event_mnist_200_epochs.csv):
    # one row per epoch, 6e-4 for ten epochs, then 0.287 at epoch 141 (20x the window's median, 12 % of
    # ln 10) and 0.110 at the next, under a tenth of ln 10 above the median: back on its way down.
    rule = TrainingRule()
    falling = [1.8 * math.exp(-i / 2) for i in range(10)] + [0.0006 + 0.0002 * (i % 3) for i in range(50)]
    assert _feed(rule, falling, classes=10) == []
    assert _feed(rule, [0.287, 0.110, 0.04, 0.01], start=60, classes=10) == []
    # The same epoch followed by one that stays up (0.287, then 0.26) stands, at the second.
    rule = TrainingRule()
    assert _feed(rule, falling, classes=10) == []
    [f] = _feed(rule, [0.287, 0.26], start=60, classes=10)
    assert f.fault == "loss_spike" and "loss 0.287 at step 60" in f.detail and len(f.evidence) == 2
    assert f.ts == step(61).ts


def test_a_loss_spike_followed_by_a_nan_stands_beside_the_nan():
    rule = TrainingRule()
    assert _feed(rule, [2.0 + 0.01 * (i % 3) for i in range(60)]) == []
    assert _feed(rule, [12.0], start=60) == []
    assert sorted(f.fault for f in _feed(rule, [math.nan], start=61)) == ["loss_spike", "nan_loss"]
