"""The stalled-loss detector's other verdicts on constructed curves: a gradient norm at zero, a
loss that regressed and stayed up (rollback when a checkpoint predates it), bad input."""

from __future__ import annotations

import math
from dataclasses import replace

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.diagnosis.rules.loss_trend import theil_sen
from faultlens.events.envelope import Envelope
from tests.helpers.sent_events import SentEvents


def step(i: int, loss, grad=1.0, rank: int = 0, **extra) -> Envelope:
    return Envelope(ts=1.7e9 + 10.0 * i, job="j", node="n0", source="train", kind="step",
                    data={"rank": rank, "step": i, "loss": loss, "grad_norm": grad, **extra})


def checkpoint(i: int) -> Envelope:
    return Envelope(ts=1.7e9 + 10.0 * i, job="j", node="n0", source="train", kind="checkpoint",
                    data={"rank": 0, "step": i, "path": f"c{i}"})


def learning(i: int) -> float:
    """A healthy curve: 6 → 2 with a wobble, still falling 1.5 %/window at the end."""
    return 2.0 + 4.0 * math.exp(-i / 60) + 0.3 * math.exp(-i / 2000) + 0.02 * math.sin(i)


def test_theil_sen_ignores_a_spike():
    xs = list(range(10))
    ys = [10 - x for x in xs]
    ys[4] = 100.0
    assert theil_sen(xs, ys) == -1.0


def test_a_gradient_norm_at_zero_is_flagged_and_a_checkpoint_before_it_means_rollback():
    det = LossStalledDetector()
    out = []
    for i in range(1, 101):
        out += det.observe(step(i, learning(i)))
    out += det.observe(checkpoint(100))
    for i in range(101, 200):
        out += det.observe(step(i, learning(100), grad=0.0))
    assert [f.fault for f in out] == ["loss_stalled"]
    assert out[0].action == "rollback" and "gradient norm" in out[0].detail and "step 100" in out[0].detail


def test_a_gradient_norm_that_only_dips_is_not_flagged():
    det = LossStalledDetector()
    out = []
    for i in range(1, 400):
        out += det.observe(step(i, learning(i), grad=0.0 if i % 7 == 0 else 1.0))
    assert out == []


def test_a_loss_that_regressed_and_stayed_up_is_flagged_with_rollback_to_the_checkpoint_at_its_best():
    det = LossStalledDetector()
    out = []
    for i in range(1, 300):
        out += det.observe(step(i, learning(i)))
        if i == 290:
            out += det.observe(checkpoint(290))
    assert out == []  # still learning
    for i in range(300, 700):
        out += det.observe(step(i, 4.0 + 0.02 * math.sin(i)))  # a spike that never recovers
    assert [f.fault for f in out] == ["loss_stalled"]
    assert out[0].action == "rollback" and "checkpoint at step 290" in out[0].detail


def test_a_regression_without_a_good_checkpoint_is_an_alert():
    det = LossStalledDetector()
    out = []
    for i in range(1, 300):
        out += det.observe(step(i, learning(i)))
    for i in range(300, 700):
        out += det.observe(step(i, 4.0 + 0.02 * math.sin(i)))
    assert [(f.fault, f.action) for f in out] == [("loss_stalled", "alert")]


def test_a_healthy_curve_with_a_recovered_spike_stays_quiet():
    det = LossStalledDetector()
    out = []
    for i in range(1, 1500):
        loss = learning(i) * (3.0 if 500 <= i < 510 else 1.0)
        out += det.observe(step(i, loss))
    assert out == []


def test_only_the_lowest_rank_is_followed_and_bad_values_are_skipped():
    det = LossStalledDetector()
    out = []
    for i in range(1, 300):
        out += det.observe(step(i, 2.77, rank=1, classes=16))  # rank 1 at chance...
        out += det.observe(step(i, learning(i), rank=0, classes=16))  # ...but rank 0 learns
        out += det.observe(step(i, "nan?", rank=0))
        out += det.observe(step(i, None, rank=0))
    assert out == []


def test_restarted_forgets_the_curve():
    det = LossStalledDetector()
    for i in range(1, 100):
        det.observe(step(i, 2.77, classes=16))
    det.restarted("j")
    assert det.observe(step(100, 2.77, classes=16)) == []


def _run(first_step: int, loss_at, **extra) -> list:
    det = LossStalledDetector()
    found = []
    for i in range(first_step, first_step + 1500):
        found += det.observe(step(i, loss_at(i), **extra))
    return found


def flat(i: int) -> float:
    """The simulated job's shape: a trained model's loss, drifting down 0.1 % a window."""
    return 2.42 - 1e-7 * i + 0.004 * math.sin(i)


def test_a_flat_curve_watched_from_an_untrained_start_never_learned():
    # The trainer says its weights began random and the pipeline saw it from step 1: it never fell
    # below where it started.
    found = _run(1, flat, from_scratch=True)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "has not fallen below its start" in found[0].detail
    # Or no word from the trainer, but its first loss is a guess's (ln 12 = 2.48: 2.42 is 97 % of it).
    assert [f.fault for f in _run(1, flat, classes=12)] == ["loss_stalled"]


def test_a_flat_curve_first_seen_mid_run_resumed_or_fine_tuned_far_below_a_guess_is_not_called_never_learned():
    # First seen at step 20,000 (the pipeline started late, or the job resumed from a checkpoint) its
    # first loss is no untrained model's, and a converged run is healthy, whatever the trainer says.
    assert _run(20_000, flat) == []
    assert _run(20_000, flat, from_scratch=True) == []
    # Seen from step 1, but the trainer says it resumed or fine-tunes a trained model, and no class count says its
    # first loss is a guess's.
    assert _run(1, flat, from_scratch=False) == []
    # Where one does (ln 12 = 2.48: 2.42 is 97 % of it), the trainer's "resumed" is a trained body under a new head
    # that starts untrained (the lead's settlement in loss round 47, fresh46's frozen EfficientNetB7 base): healthy
    # only if it learns (loss_start.untrained_head).
    found = _run(1, flat, from_scratch=False, classes=12)
    assert [f.fault for f in found] == ["loss_stalled"] and "has not fallen below its start" in found[0].detail
    # Seen from step 1 (a hook counting its own steps restarts at 1 on a resume), no word from the
    # trainer: a first loss far below a guess's is a trained model's (issue 54: flat at 2.0 over a
    # 50,257-token vocabulary, ln = 10.8), and nothing at all tells an untrained start.
    assert _run(1, lambda i: 2.0 + 0.004 * math.sin(i), classes=50257) == []
    assert _run(1, flat) == []


def test_a_resumed_run_far_below_chance_is_quiet_and_one_at_chance_is_still_flagged():
    # Issue 54's resumed run: first seen at step 30,000, flat at 2.0, chance ln(50257) = 10.8.
    assert _run(30_000, lambda i: 2.0 + 0.004 * math.sin(i), classes=50257) == []
    # A resumed run stuck at chance is stalled whatever its start: that verdict needs no start.
    found = _run(30_000, lambda i: 10.82 + 0.004 * math.sin(i), classes=50257)
    assert [f.fault for f in found] == ["loss_stalled"] and "at chance" in found[0].detail


def test_a_run_first_seen_mid_way_wandering_above_its_best_is_no_regression_and_one_that_climbs_is():
    # A long run first seen at 4.5 (its first 20,000 steps unseen) falls to a window median of 4.15,
    # then wanders back to 4.35: over a quarter of what it learned since it was first seen, but 5 % of
    # its level, a plateau's wander (issue 54, fresh batch 1: a speculative-decoding drafter replayed
    # from its middle).
    def seen_late(then: float):
        return lambda i: (4.5 - 0.5 * (i - 20_000) / 200 if i < 20_200 else then) + 0.004 * math.sin(i)

    assert _run(20_000, seen_late(4.35)) == []
    # Climbing a quarter above the level it had reached, it is giving back what it learned.
    found = _run(20_000, seen_late(5.4))
    assert [f.fault for f in found] == ["loss_stalled"] and "stays above" in found[0].detail



def test_the_hooks_word_reaches_the_detector():
    from faultlens.events.payloads import typed
    from faultlens.events.payloads_job import TrainStep
    from faultlens.trainer_hooks.hook import TrainerHook

    for said, fault in ((True, ["loss_stalled"]), (False, []), (None, [])):
        sent = SentEvents()
        hook = TrainerHook(job="j", rank=0, node="n0", settings=None, listen=False, producer=sent,
                           flight_recorder=False, from_scratch=said)
        for i in range(1, 300):
            hook.step(loss=flat(i), step=i)
        assert all(typed(e, TrainStep).from_scratch is said for e in sent.events)
        # The hook stamps wall time: space the events as a 10 s step would, so a window is 120 steps.
        spaced = [replace(e, ts=1.7e9 + 10.0 * n) for n, e in enumerate(sent.events)]
        det = LossStalledDetector()
        assert [f.fault for e in spaced for f in det.observe(e)] == fault, said


def ack(i: int, rank: int = 0) -> Envelope:
    return Envelope(ts=1.7e9 + 10.0 * i + 1, job="j", node="n0", source="train", kind="command_ack",
                    data={"rank": rank, "command_id": f"c{i}", "action": "checkpoint", "status": "done"})


def test_the_curve_is_the_lowest_rank_that_reports_a_loss_not_a_lower_rank_that_reports_none():
    # A pipeline-parallel job: the loss exists on its last stage (rank 3) only; rank 0 reports steps
    # without a loss, acknowledges commands and writes the checkpoints. Rank 0 must neither take the
    # curve nor restart it, and its checkpoint is the job's rollback target.
    det = LossStalledDetector()
    out = []
    for i in range(1, 101):
        out += det.observe(step(i, None, rank=0))
        out += det.observe(ack(i))
        out += det.observe(step(i, learning(i), rank=3))
    out += det.observe(checkpoint(100))
    for i in range(101, 200):
        out += det.observe(step(i, None, rank=0))
        out += det.observe(ack(i))
        out += det.observe(step(i, learning(100), grad=0.0, rank=3))
    assert [f.fault for f in out] == ["loss_stalled"]
    assert out[0].action == "rollback" and "rank 3" in out[0].detail and "step 100" in out[0].detail


def test_a_first_loss_a_tenth_below_a_guess_is_a_trained_models():
    # Issue 54, fresh batch 4: a fine-tune resumed at 3.66 against ln 61 = 4.11 (89 %), its hook
    # counting steps from 1 again, creeping down 1 % in 20 epochs: not one that never learned.
    creeping = [3.664 - 0.0015 * i for i in range(40)]
    det = LossStalledDetector(window_s=0.0)
    assert [f for i, v in enumerate(creeping, 1) for f in det.observe(step(i, v, classes=61))] == []
    # At 95 % of ln 61 it is a guess's loss, and the same creep never learned.
    det = LossStalledDetector(window_s=0.0)
    found = [f for i, v in enumerate(creeping, 1) for f in det.observe(step(i, v + 0.24, classes=61))]
    assert [f.fault for f in found] == ["loss_stalled"] and "has not fallen below its start" in found[0].detail


def test_a_run_leaving_chance_at_the_end_of_its_window_is_not_called_stalled():
    # Issue 54, fresh batch 4: 17 epochs at ln 61 in a warm-up, then 4.080, 4.065, 4.052 at the window's
    # end: the window's trend is still the plateau's, its last block is below every earlier one.
    plateau = [4.111, 4.0956, 4.0921, 4.0904, 4.0895, 4.0888, 4.0883, 4.0879, 4.0876, 4.0874, 4.0871,
               4.0868, 4.0866, 4.0862, 4.0859, 4.0854, 4.0844]
    leaving = plateau + [4.0796, 4.0650, 4.0519, 4.0405, 4.0291, 4.0173, 4.0063, 3.988]
    det = LossStalledDetector(window_s=0.0)
    assert [f for i, v in enumerate(leaving, 1) for f in det.observe(step(i, v, classes=61))] == []
    # The run beside it that stays: flagged at chance once its window is whole.
    staying = plateau + [4.0843, 4.0842, 4.0842, 4.0841, 4.0840]
    det = LossStalledDetector(window_s=0.0)
    found = [f for i, v in enumerate(staying, 1) for f in det.observe(step(i, v, classes=61))]
    assert [f.fault for f in found] == ["loss_stalled"] and "at chance" in found[0].detail


def test_a_likelihood_loss_below_zero_wandering_above_its_best_is_no_regression_and_one_losing_a_quarter_is():
    # A VAE's Gaussian negative log-likelihood, first seen mid-run at -93.0, learns to -94.0 and wanders
    # back to -93.5: half of what it learned since it was first seen, half a percent of its level
    # (issue 54, fresh batch 5: replayed from its middle, it was called a regression).
    def seen_late(then: float):
        return lambda i: (-93.0 - (i - 3000) / 300 if i < 3300 else -94.0 if i < 3600 else then) + 0.004 * math.sin(i)

    assert _run(3000, seen_late(-93.5)) == []
    found = _run(3000, seen_late(-60.0))
    assert [f.fault for f in found] == ["loss_stalled"] and "stays above" in found[0].detail


def test_a_run_watched_from_its_first_logged_step_is_untrained_when_its_trainer_logs_every_50th():
    # Lightning's CSV logger and an HF Trainer's logging_steps report every k-th step: a from-scratch
    # run is first seen at step 49, within its first window of steps though past its first 20 events
    # (issue 54, fresh batch 6's GPT pretraining stuck at 7.6 for 11,000 steps).
    det = LossStalledDetector()
    found = []
    for k in range(300):
        i = 49 + 50 * k
        found += det.observe(step(i, flat(k), from_scratch=True))
    assert [f.fault for f in found] == ["loss_stalled"] and "has not fallen below its start" in found[0].detail
    # First seen at step 20,049 with the same stride, it is a resumed run's curve: no verdict.
    det = LossStalledDetector()
    assert [f for k in range(300) for f in det.observe(step(20_049 + 50 * k, flat(k), from_scratch=True))] == []


def test_a_run_that_came_down_from_a_level_above_its_start_has_learned_since():
    # Federated averaging on non-IID clients (issue 54, fresh batch 6): the global model starts at
    # ln 10, is pulled to 3-7 by its first rounds' client updates, and is back at 2.19 twenty rounds on
    # (5 % under ln 10), learning. Its start is not the only level it has come down from.
    det = LossStalledDetector(window_s=0.0)
    found = []
    for i in range(1, 61):
        level = 2.3026 if i <= 2 else 6.0 - 0.18 * (i - 3) + 0.3 * math.sin(i) if i <= 20 else 2.19 + 0.04 * math.sin(i)
        found += det.observe(step(i, level, classes=10))
    assert found == []
    # A run that stays near its start (never above it) is still one that never learned.
    det = LossStalledDetector(window_s=0.0)
    found = [f for i in range(1, 61) for f in det.observe(step(i, 2.25 + 0.04 * math.sin(i), classes=10))]
    assert found and {f.fault for f in found} == {"loss_stalled"} and "has not fallen below its start" in found[0].detail


def test_a_loss_far_above_a_guess_at_every_log_is_said_before_a_window_and_a_falling_one_is_not():
    # Twice ln(16) and more at 5 logs in a row, not coming down across them: worse than a guess on every batch, said at
    # the 5th log (issue 54, fresh batch 27's alpaca-lora LoRA in the millions). A random init above a guess's that
    # falls from there is learning.
    det = LossStalledDetector()
    swinging = [40.0, 900.0, 120.0, 3000.0, 75.0, 500.0]
    out = [f for i, v in enumerate(swinging, 1) for f in det.observe(step(i, v, classes=16))]
    assert len(out) == 1 and "over twice a guess's ln(16)" in out[0].detail and "step 5)" in out[0].detail
    det = LossStalledDetector()
    assert [f for i in range(1, 40) for f in det.observe(step(i, 12.0 - 0.2 * i, classes=16))] == []
