"""A run that stopped learning: fault class ``loss_stalled`` (docs/design.md §3).

The training rules (diagnosis/rules/training.py) see explosions: a NaN, a loss or grad norm 5×
its median. A run whose loss sits at chance, or stopped falling and will not fall again, raises
neither while it burns its whole allocation (issue 50: AdamW at lr 0.3 in the POET bench). This
detector watches each job's loss curve (one rank's, the lowest that reports a loss: a data-parallel job's
ranks see the same batch statistics) and says so while the run still has most of its time left.

What it judges, every tenth of a window, once the run has trained for a whole window:

* the window is the last ``window_s`` of the run's own time, in steps (its median interval
  between step events), between ``MIN_WINDOW`` and ``MAX_WINDOW`` steps: a 1 s/step run and a
  10 s/step run are judged over the same stretch of wall time, and a warm-up shorter than the
  window is never judged;
* learning = a Theil-Sen slope (robust to spikes) over the window's block medians that drops the
  loss by at least 1 % of its level across the window, or a run leaving a plateau (the window's
  last block below every earlier one by three robust sigmas of its losses). A run still learning is
  never flagged;
* not learning, the run is stalled when its loss is
  - at chance: within 2 % of ln(classes), the loss of a uniform guess, when the step event says
    how many classes (a vocabulary) the trainer predicts (``classes``, docs/events.md), or the
    loss of answering without the input where the trainer states it (``chance_loss``: the class prior's
    entropy, an MSE's labels' variance; loss_chance.py); a guess's loss is the same on
    every batch, so a per-batch loss spread by over a tenth of its level is at chance only while it
    has not come down from above it (a blow-up), and a held-out metric that left chance at its latest
    evaluation answers for what the model predicts (fresh batch 11), as a held-out loss that may be leaving
    it does (seen once, or falling faster at each evaluation: loss_eval.HeldOutWatch.leaving, fresh batch 17);
  - never learned: not 5 % below where it started (its first loss, the untrained model's: a
    median of the first steps would take in the rise a too-high learning rate causes at once) in
    any tenth of the window, its spread under a tenth of its level (a GAN's or DINO's loss from
    random weights swings or dips and comes back: a contest or a schedule, not a stall),
    judged only when the curve was watched from an untrained model: first seen within its first
    window of steps (a trainer that logs every 50th step is first seen at step 49), and either the
    trainer says it started from scratch (``from_scratch``) or its first
    loss is that of a guess (at least 9/10 of ln(classes)), the trainer's "resumed" notwithstanding: a new head on a
    trained body starts untrained (loss_start.untrained_head; fresh batch 46's frozen EfficientNetB7 base, the lead's
    settlement). A resumed run or a fine-tune starts
    from a trained model's loss, flat and far below chance (issue 54: first seen at step 30,000,
    flat at 2.0), and a run whose start nothing tells is not called one that never learned; nor is
    one that came down from a higher level it was judged at (a federated model pulled above chance by
    its first rounds, coming back: fresh batch 6);
  - frozen: the same value to 6 digits over the whole window (the weights no longer move), or the same
    batches' values to 5 digits cycle after cycle, the period found from the losses (loss_cycle.py); before
    the first window fills, 5 logs alike to every digit printed, those digits a thousandth of the level or finer,
    away from ln(classes) unless the trainer says the model was trained, and there 3 where each says a learning rate
    above zero and none above the one before (loss_cycle.printed_frozen: an 8-log excerpt; a DPO at ln 2 at a falling
    rate, fresh batches 23 and 32, not one whose warm-up raises its rate from 0); and at any step, 5 logs at exactly 0
    straight from the level the run was at, from a last loss printed to a thousandth of its level or finer: nothing
    is scored (loss_cycle.zeroed_at_once: every target masked; fresh batch 20's 1.4138, then 0.0), or 1 log straight
    after a blow-up ten times every loss of the 5 or more before it (fresh batch 28's 1.32, 34,023.79, then 0.0); and
    3 logs at 0 from the first, watched from its start, while every held-out loss evaluated is 0 too: nothing is
    scored (loss_cycle.zero_from_the_start: fresh batch 33's Inception-v1 at 0.000000 with held-out accuracy 1);
    before the first window fills, watched from random weights, 5 logs within 1e-5 of their level printed to a
    tenth of that or finer, away from ln(classes) (loss_near_frozen.py: fresh batch 37's CNN at 10.845976-10.845994);
    and at any step, 3 logs at the ceiling a framework clips a softmax loss at, Caffe's -ln FLT_MIN = 87.3365 or
    Keras's -ln 1e-7 = 16.1181: every sample's true class at probability 0 (loss_saturated.py: fresh batch 37's
    GoogleNet, 11.2306 then 87.3365), or 2 beside a held-out loss within 1e-5 of it; a loss at zero to float
    rounding (|loss| <= 1e-12, not 0) alike at 5 logs, one value of 0.1 or more at 15, and a classifier's loss at 0
    from its first log with no held-out loss above 0 (loss_repeated.py: fresh batch 39);
  - regressed: every block of the window above the best level the run reached (the lowest median
    of a judged window) by a quarter of what it had learned and a quarter of that level's size (a
    likelihood loss at -94 is no smaller a level than one at 94), once what
    it learned exceeds three robust sigmas of its step-to-step noise: a spike that did not recover,
    not the noise of a curve first seen late whose "learned" is a noisy first batch's loss, nor a
    long run's plateau first seen mid-way (what it learned before is unseen: 5 % above its best is
    a wander, issue 54's fresh batch 1), nor a rise the schedule made: where steps carry ``lr``, one
    above the best window's learning rate by a quarter since the window began (a warm restart), nor a
    rise back to no more than the held-out loss evaluated by its best: the fit beyond what held out
    (loss_eval.HeldOutWatch.fit_only; fresh batch 19's solGPT);
  - diverging: climbing steadily through the window (a Mann-Kendall trend over its block medians,
    its middle third within the climb, not with either end: a step is a curriculum's next stage or a
    new data mix), its later half's median a quarter above its earlier half's and a tenth of the
    run's scale above, to a quarter above where the run was first seen (its first loss is one batch's)
    and above every window median it has come back from; never a loss that has gone below zero (a surrogate),
    nor while an evaluated metric reaches its best yet (an RL critic's loss grows with the return: fresh
    batch 15). This is how a run first seen mid-way is caught coming apart (issue 54's DeepLab
    run: what it learned before is unseen, so "regressed" cannot weigh it); and at any step, 5 logs in a row
    each ten times every loss before them, those above 1e-3: blown up, not come back (loss_diverging.blown_up:
    fresh batch 29's Faster R-CNN, 0.06 then 5.4e19 up to 2.5e22; fresh batch 5's Keras MLP, 1.18 then 13-27);
    and at any step, the latest 5 logs each five times the first loss, within a factor of 2 of each other, every log
    since above it: left where it was first seen for a level it holds (loss_diverging.held_above_first: fresh batch
    33's YOLOv4 restored at 10.57, then 98-136; its MAR network, 10.8 at iteration 0, then 70-86); and at any step,
    after a loss below half its first, the latest 5 logs each twice every loss before them, its first among them:
    lost what it learned (loss_diverging.lost_what_it_learned: fresh batch 11's GPT-2 in fp32, 10.93 to 4.82, then 270
    coming down through 69), or at an evaluation a held-out loss that halved back above its first evaluation beside
    training logs held at twice the lowest (lost_what_it_learned_held_out: fresh batch 30's wav2vec2), neither while a
    metric is better at its latest evaluation than at its first; and at an
    evaluation, a held-out loss ten times every evaluation before beside a training loss at its step ten times every
    loss before: the weights came apart, no batch's spike (loss_diverging.blown_up_held_out: fresh batch 35's
    LadderNet, 0.16 then 1.6e18, validation 3.05 then 1.9e7); and at any step, the latest 5 logs each ten times the
    median of every loss before them: blown up from its level, in steps (loss_diverging.blown_up_from_level: fresh
    batch 43's character CNN, 0.23-0.48, then 3.6 up to 4977), or one log ten thousand times every loss before it:
    jumped (loss_diverging.jumped: fresh batch 43's PFNL, 0.01, then 1.5e6), neither while a metric is better at its
    latest evaluation than at its first;
  - learned a little, then stopped (diagnosis/rules/loss_plateau.py): watched from its start, not a trained
    model's (a first loss under 9/10 of a guess's, random weights unsaid: a fine-tune), it fell
    5-25 % of its first loss, then did not move for five times as long as that fall took (two windows at
    least) while the learning rate, where steps say it, is near its peak and any held-out loss has stopped
    too (loss_eval.HeldOutWatch.falling): a class prior or a data variance, levels no step event carries
    (issue 54, fresh batch 6), not a loss near a floor of its own (fresh batch 14);
* held out, where the trainer evaluates (``train``/``eval``): its metrics at chance for five evaluations
  in a row, or for one beside a training loss that fitted its data, under a tenth of a guess's
  (diagnosis/rules/loss_eval.py), but not while the held-out loss falls at each of the latest five by 1 % of its level
  in all beside a training loss falling at each (still learning: fresh batch 46's Conv1D classifier); one that left chance at the
  latest evaluation quiets "never learned"; and, watched from an untrained model, a held-out accuracy below 1 the
  same to every digit at each of its first five evaluations: no answer moved (loss_eval_unchanged.py), or a held-out
  loss so, the evaluation's only kind of metric, while the training loss moved by 1 % of its level: outputs that
  depend on nothing (loss_eval_frozen.py: fresh batch 37's triplet FaceNets at their margin 0.2000), or a held-out
  loss and the latest training loss both a tenth above its start and a guess's, a window of steps on: worse than the
  random model it came from; whatever its start, a held-out loss a tenth above its first evaluation at each of five
  since, beside a training loss above its first at every log since: worse than where it was first seen
  (loss_worse_than_start.py); at any step, after a loss below half of ln(classes), one within a tenth of it at 10 logs
  in a row or a tenth above it at 5; before a whole window, over twice it at 5 in a row and not coming down across them;
  first seen trained, at ln(classes) to four digits at 10 (loss_chance.collapsed);
* and apart from the loss, a gradient norm at zero for a fifth of a window: nothing will move the weights
  again (diagnosis/rules/loss_gradient.py).

A run that learned and then levelled off (convergence, the end of a schedule, a plateau below its
start) is none of these and stays quiet. The action is ``alert`` (a person decides: the cause is
almost always the recipe, which no restart fixes), or ``rollback`` when the run regressed or its
gradient collapsed after a checkpoint it saved while it was still learning (or diverged after one): that checkpoint holds a
better model than the one training now. One finding per job until its loss learns again.
"""

from __future__ import annotations

import math
import statistics

from faultlens.diagnosis.rules.base import Finding
from faultlens.diagnosis.rules.loss_chance import COLLAPSED_LOGS, collapsed, note_guess
from faultlens.diagnosis.rules.loss_curve import MAX_WINDOW, LossCurve, Verdict
from faultlens.diagnosis.rules.loss_cycle import BLOWN_UP, printed_frozen, zero_from_the_start, zeroed_at_once
from faultlens.diagnosis.rules.loss_diverging import (
    HELD_ABOVE,
    LOST,
    blown_up,
    blown_up_from_level,
    blown_up_held_out,
    held_above_first,
    jumped,
    lost_what_it_learned,
    lost_what_it_learned_held_out,
    running_away,
)
from faultlens.diagnosis.rules.loss_eval import EVALS, HeldOutWatch
from faultlens.diagnosis.rules.loss_eval_frozen import held_out_frozen
from faultlens.diagnosis.rules.loss_gradient import gradient_zero
from faultlens.diagnosis.rules.loss_near_frozen import near_frozen
from faultlens.diagnosis.rules.loss_repeated import float_zero, long_repeat, zero_with_classes
from faultlens.diagnosis.rules.loss_saturated import saturated, saturated_held_out
from faultlens.diagnosis.rules.loss_start import fitted, from_start, untrained
from faultlens.diagnosis.rules.loss_window import judge_window
from faultlens.diagnosis.rules.loss_worse_than_start import fell_back_from_first, worse_than_first_seen, worse_than_start
from faultlens.events.envelope import Envelope, InvalidEvent, as_float
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainCheckpoint, TrainEval, TrainStep

WINDOW_S = 1200.0
MIN_WINDOW = 20


class LossStalledDetector:
    """Job-level, pure: ``train`` step, checkpoint and eval events in, ``loss_stalled`` findings out."""

    sources = frozenset({"train"})

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._curves: dict[str, LossCurve] = {}
        # A checkpoint is the job's, whichever rank reports it (the loss may come from a pipeline's
        # last stage only, the checkpoint from rank 0): kept per job, shared by its curve.
        self._checkpoints: dict[str, list[int]] = {}
        self.held_out = HeldOutWatch()  # the trainer's evaluations on held-out data (loss_eval.py)

    def restarted(self, job: str) -> None:
        """A restart (or rollback) begins a new curve: judge it afresh."""
        self._curves.pop(job, None)
        self._checkpoints.pop(job, None)
        self.held_out.restarted(job)

    def tick(self, now: float) -> list[Finding]:
        return []

    def observe(self, event: Envelope) -> list[Finding]:
        if event.source != "train":
            return []
        if event.kind not in ("step", "checkpoint", "eval"):
            return []
        try:
            payload = typed(event, (TrainCheckpoint, TrainStep, TrainEval))
        except InvalidEvent:
            # The payload check owns its validation (and its dead letter): nothing to learn here.
            return []
        if isinstance(payload, TrainEval):
            curve = self._curves.get(event.job)
            random_start = curve is not None and untrained(curve, self._window(curve))
            found = self.held_out.observe(event, payload, told=curve is not None and curve.fired,
                                          fitted=curve is not None and fitted(curve), untrained=random_start,
                                          training=curve.losses[-1][1] if curve is not None and curve.losses else None)
            if found or curve is None or curve.fired or payload.step is None:
                return found
            # Worse than its random start, or than where it was first seen, on held-out and training data alike: blown
            # up, or ruined by its learning rate (loss_worse_than_start.py).
            verdict = worse_than_start(curve, payload.step, payload.metrics or {}, self._window(curve)) if random_start else None
            # ...or a held-out loss unchanged from its first evaluation while the weights moved (loss_eval_frozen.py).
            if verdict is None and random_start and not self.held_out.told(event.job):
                verdict = held_out_frozen(curve, self.held_out.held_losses(event.job), payload.metrics or {}, EVALS)
            # ...or every held-out metric worse than at its first evaluation while training does not fall (round 49).
            if verdict is None and random_start:
                verdict = fell_back_from_first(curve, self.held_out.history(event.job), payload.step, 2 * EVALS)
            # ...unless a metric evaluated is better than at its first evaluation (improving from step 0 on).
            if verdict is None and not self.held_out.improving(event.job, 0):
                verdict = worse_than_first_seen(curve, self.held_out.held_losses(event.job), payload.step, EVALS)
            # A held-out loss and the training loss at its step each tenfold every value before: no batch's spike.
            if verdict is None:
                verdict = blown_up_held_out(curve, self.held_out.held_losses(event.job), payload.step)
            # Back at its first evaluation after halving it, its training loss held at twice its lowest: lost what it
            # learned, unless a metric is better now than at its first evaluation (loss_diverging.py).
            if verdict is None and not self.held_out.better_than_first(event.job):
                verdict = lost_what_it_learned_held_out(curve, self.held_out.held_losses(event.job), payload.step)
            return self._finding(curve, event, verdict, payload.step)
        if isinstance(payload, TrainCheckpoint):
            if payload.step is not None:
                self._checkpoints.setdefault(event.job, []).append(payload.step)
            return []
        # The curve is the lowest rank that reports a loss: a rank that reports none (a pipeline's
        # first stages, whose steps carry no loss) or says something else (a command_ack) must not
        # take the curve from the rank that does, nor restart it.
        loss = as_float(payload.loss)
        if payload.rank is None or loss is None:
            return []
        rank = payload.rank
        curve = self._curves.get(event.job)
        if curve is None or rank < curve.rank:
            curve = self._curves[event.job] = LossCurve(rank, checkpoints=self._checkpoints.setdefault(event.job, []))
        if rank != curve.rank:
            return []
        return self._step(curve, event)

    def _step(self, curve: LossCurve, event: Envelope) -> list[Finding]:
        reported = typed(event, TrainStep)
        step = reported.step
        loss = as_float(reported.loss)
        if step is None or loss is None or not math.isfinite(loss):
            return []  # a NaN is the training rule's; a step without a loss says nothing here
        classes = reported.classes
        if classes is not None and classes >= 2:
            curve.classes = classes
        if reported.from_scratch is not None:
            curve.from_scratch = reported.from_scratch
        if reported.chance_loss is not None and reported.chance_loss > 0:
            curve.chance_loss = float(reported.chance_loss)
        if reported.lr is not None:
            curve.hold_lr(step, float(reported.lr))
        if curve.last_ts is not None and event.ts > curve.last_ts:
            curve.intervals.append(event.ts - curve.last_ts)
        curve.last_ts = event.ts
        curve.hold(step, loss)
        curve.signed = curve.signed or loss < 0
        curve.peak = max(curve.peak, loss)
        curve.lowest = min(curve.lowest, loss)
        if curve.first is not None:
            curve.low_since_first = min(curve.low_since_first, loss)
        note_guess(curve, loss)
        curve.seen += 1
        curve.held_out_learned = self.held_out.learned(event.job)
        curve.held_out_falling = self.held_out.falling(event.job)
        curve.held_out_leaving = self.held_out.leaving(event.job)
        if curve.first is None:
            curve.first, curve.first_step = loss, step
        grad = as_float(reported.grad_norm)
        verdict = (gradient_zero(curve, step, grad, self._window(curve))
                   if grad is not None and math.isfinite(grad) else None)
        # Frozen before the first whole window can say so: a run shorter than a window (an 8-log excerpt), or
        # one frozen from its start, is otherwise never judged. Where the steps say their gradient is zero, the
        # gradient watch says it, with the checkpoint before it.
        if verdict is None and curve.grad_zero_run == 0 and curve.seen < self._window(curve):
            verdict = printed_frozen(curve)
            if verdict is None and untrained(curve, self._window(curve)):  # moving in its sixth digit only
                verdict = near_frozen(curve)
            # At zero to float rounding, or one value at 15 logs though its float keeps few digits (loss_repeated.py).
            verdict = verdict or float_zero(curve) or long_repeat(curve)
        # A loss at exactly 0 straight from its level, at any time: no window judges a loss of 0 (a share of it
        # says nothing), and nothing is scored from there on (loss_cycle.zeroed_at_once).
        if verdict is None and loss == 0.0 and curve.grad_zero_run == 0:
            verdict = zeroed_at_once(curve) or zero_from_the_start(
                curve, self.held_out.held_losses(event.job), from_start(curve, self._window(curve))) or zero_with_classes(
                curve, self.held_out.held_losses(event.job))
        # At the ceiling a framework clips a softmax loss at, whatever the start (loss_saturated.py).
        if verdict is None and not curve.fired:
            verdict = saturated(curve) or saturated_held_out(curve, self.held_out.held_losses(event.job))
        if verdict is None and loss >= BLOWN_UP * curve.first > 1e-2 and not curve.fired:  # loss_diverging.blown_up
            verdict = blown_up(curve)
        if verdict is None and not curve.fired:  # told once: the judge below says when it learns again
            # Learned, then a guess's or worse; trained, a guess's exactly; far above one early: no window to fill (loss_chance.py)
            exact, size = curve.exact_guess >= COLLAPSED_LOGS, self._window(curve)  # where from its start is asked at all
            verdict = collapsed(curve, step, exact and not from_start(curve, size), early=curve.seen < size)
        # Worse than where it was first seen, held (loss_diverging.held_above_first), unless a metric evaluated is better
        # than at its first evaluation: an RL critic's loss grows with the return it learns to predict.
        if (verdict is None and loss >= HELD_ABOVE * curve.first > 1e-3 and not curve.fired
                and not self.held_out.improving(event.job, 0)):
            verdict = held_above_first(curve)
        # Learned, then lost it all and more, held (loss_diverging.lost_what_it_learned), held back the same way.
        if (verdict is None and loss >= LOST * curve.first > 1e-3 and not curve.fired
                and not self.held_out.better_than_first(event.job)):
            verdict = lost_what_it_learned(curve)
        # Ten times the level the run held at 5 logs in a row, or ten thousand times every loss before at one: blown up
        # without a nan (loss_diverging.blown_up_from_level, jumped), held back the same way.
        if (verdict is None and loss >= BLOWN_UP * curve.first > 1e-3 and not curve.fired
                and not self.held_out.better_than_first(event.job)):
            verdict = blown_up_from_level(curve) or jumped(curve)
        # Away from zero by orders of magnitude, either sign, in 3 logs (loss_diverging.running_away), held back the same way.
        if verdict is None and not curve.fired and not self.held_out.improving(event.job, 0):
            verdict = running_away(curve)
        if verdict is None and curve.seen >= curve.next_check:
            verdict = judge_window(curve, self._window(curve), self.held_out, event.job)
        return self._finding(curve, event, verdict, step)

    @staticmethod
    def _finding(curve: LossCurve, event: Envelope, verdict: Verdict | None, step: int) -> list[Finding]:
        """The job's one finding for ``verdict``, at ``event``, unless it has already raised one."""
        if verdict is None or curve.fired:
            return []
        curve.fired = True
        return [Finding(job=event.job, ts=event.ts, fault="loss_stalled", action="rollback" if verdict.rollback else "alert",
                        ranks=(curve.rank,), entity="loss", evidence=(event.id,),
                        detail=f"{verdict.why} (rank {curve.rank}, step {step})"[:300])]

    def _window(self, curve: LossCurve) -> int:
        interval = statistics.median(curve.intervals) if curve.intervals else 0.0
        steps = round(self.window_s / interval) if interval > 0 else MAX_WINDOW
        return max(MIN_WINDOW, min(MAX_WINDOW, steps))
