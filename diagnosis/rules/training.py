"""Training rules: user-code exceptions, CUDA errors, NaN/inf losses (a held-out one too) and loss / grad-norm spikes
(a loss spike once its rank has shown a window of values, the tail it must stand out of, and the
next loss has not taken it back; a grad-norm spike once the next step's loss answers it by a tenth
of its scale; neither where the
series reaches that far routinely, as a per-sample loss at batch size 1 does; a loss that goes below
zero is never ratio-spiked).

None of these evicts on first sight: a user bug is rolled back, a NaN or a CUDA error goes to
stop-time diagnosis (docs/design.md §4, step 3). Loss anomalies are job-wide (every data-parallel
replica sees the same batch statistics), so their findings name no node: one per job, with the
rank that first showed it in the detail.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from math import isfinite
from typing import NamedTuple

from faultlens.diagnosis.rules.base import Finding, line_of, missing, or_else, parsed_fault
from faultlens.diagnosis.rules.loss_held_out_nan import HeldOutNan
from faultlens.events.envelope import Envelope, as_float
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import NcclError, NcclException, NcclNan, TrainEval, TrainStep

SPIKE_FACTOR = 5.0
BASELINE_STEPS = 50
MIN_BASELINE = 10
# MAD of a flat series is 0; a jump must also clear this many robust sigmas, with a floor on sigma.
SPIKE_SIGMAS = 6.0
# ...and rise by this share of the metric's scale: for the loss, the larger of ln(classes) (a
# guess's loss: the whole range from knowing nothing to knowing everything) and the highest value
# the run has shown (where it came down from); for the grad norm, its highest. A ratio alone calls
# a fine-tune at 1e-7 moving to 5e-7 a spike (issue 54), and a converged run's per-batch noise too
# (minGPT's adder, 0.017 -> 0.15, 6 % of ln 10, gone at the next log); a rise under a tenth of that
# range gives up less than a tenth of what the run learned, nothing to stop a job for.
SPIKE_OF_SCALE = 0.1
# A cross-entropy is computed from probabilities whose float32 resolution near 1 is 2^-23 = 1.2e-7:
# a loss near 1e-7 is a few ulps of 1 - p (a face tracker's head logs 5.96e-08, 1.19e-07, 3.58e-07:
# 1/2, 1 and 3 ulps), and its moves are rounding. A loss rise under this is none, whatever the run's
# scale; it holds where nothing else tells the scale (a run first seen already at 1e-7, no classes).
LOSS_RESOLUTION = 1e-5
# A gradient-norm spike the loss does not answer is one the optimizer absorbed (clipped, or a single
# batch's): a speculative-decoding drafter logs eight at 5-17x its median over 40,000 steps while its
# loss falls (issue 54, fresh batch 1). The grad norm of step t is the update applied at t, whose harm
# shows in the loss after it: the spike stands when the next step's loss rises this many of its own
# robust sigmas and a tenth of its scale, as a loss spike must (a rise worth stopping for); where the
# step reports no loss, it stands alone. The same step's loss says only that the batch was hard: TrOCR's
# bad batches lift a 0.14 loss to 0.49 with a 12x grad norm and the next log is 0.15 again (issue 54,
# fresh batch 3). A loss spike waits for the same answer: the next loss still that far above the median.
# One the run takes back at once (a per-epoch loss at 20x its median for one epoch, the next one under
# a tenth of its scale above it: an LSTM memorising event-MNIST, at epochs 141 and 183 of 200, issue 54,
# fresh batch 6) cost nothing worth stopping the job for, which is what the finding asks (a rollback);
# a spike that holds for two logs (the simulator's, x8 for two steps) stands one log later.
ANSWER_SIGMAS = 3.0
# A spike is rare: a value factor x its median stands only where fewer than this many of the series'
# last window of values (spikes included) were already factor x the median of their time. A per-sample
# loss at batch size 1 reaches 10-1,000x its median every few steps (a crystal-graph regression logs
# 0.06, then 82, then 0.05: issue 54, fresh batch 4), and what a series does routinely is its noise,
# which no median and MAD of its accepted values can see (its tail is never accepted). A real spike
# comes out of a series that went that far once at most; its own sustained steps are not new spikes.
SPIKE_ROUTINE = 2
# ...and it stands out of the series' own tail: fewer than SPIKE_ROUTINE of the window's values came
# within this factor of it. A per-batch loss whose batches reach 5-8x its median (0.55-0.85 around
# 0.1) but each just under 5x the median of its time counts no excursion, and its one batch at 1.65
# is that tail, not a spike (a T5 fine-tune; a policy fine-tune's 0.196 after 0.22 and 0.23:
# issue 54, fresh batch 5). A real spike comes out of a series whose values stayed a third of it.
SPIKE_NEAR = 3.0
# Both tests read the series' tail, which a loss shows only over a whole window of its own values: with
# 14 of them, "fewer than two within a third" holds of a per-batch loss that has not yet drawn its hard
# batches (a binary fine-tune first seen mid-way at 0.99 after 14 batches around 0.14; a policy
# fine-tune's 0.196, a batch-size-1 regression's 67x: issue 54, fresh batches 4-6). A loss is judged a
# spike once its rank has shown a window (``window`` values); a grad norm, whose spike the next loss
# must answer, from MIN_BASELINE on. A NaN, a divergence and a regression are the other rules' and wait
# for nothing.
# An fp16 loss scaler's skipped step is no NaN of the model's: the scaled gradient overflowed, the scaler
# skipped the update and halved its scale, and the trainer logs the step's NaN or inf norm beside the loss
# its forward made, an ordinary one (issue 54, fresh batch 23: a DPO LoRA on a T4 logs grad_norm NaN at 4
# of 75 steps, its loss 0.69, 0.69, 0.44, 1.1 there, and learns from ln 2 to 0.2). A non-finite norm is
# the model's where its step's loss says so: none sent (the Hugging Face callback sends none for a
# non-finite window), non-finite, exactly 0 (the Trainer's stand-in for a NaN window's mean: fresh
# batches 1, 12, 20), blown up (factor x the median of its kept losses: fresh batch 23's VG-LLM, 14.4 then
# 8195.8), or a surrogate's (signed: nothing tells its blow-up); or where such steps run on past what a
# scaler does: halving from 2**16 (torch's GradScaler, apex and DeepSpeed start there) passes a scale of
# 1 after this many skips in a row, below which every step overflows (docs/design.md §9: nan_loss).
# A first step's loss, with no class count to weigh it, counts as ordinary: the scaler starts at its
# highest scale and skips most at the start (fresh batch 28: a KG-LLM QLoRA logs grad_norm NaN beside its
# first loss, 4.31 at learning rate 0, and learns to 0.4; a DeepSpeed fp16 tutorial skips 23 steps before
# its 30th). A model broken from its first step shows it at its next: a loss of 0, non-finite or blown up
# against the first (fresh batch 24's ModernBERT, 0.2051 then 0.0; fresh batch 27's Qwen2.5-VL, 60.57 then 0.0).
SCALER_SKIPS = 16


def robust_sigma(values) -> tuple[float, float]:
    """(median, 1.4826 × MAD): the centre and spread that one outlier cannot move."""
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return med, 1.4826 * mad


@dataclass(slots=True)
class _Baseline:
    """A rank's last values of one metric and their minimum, kept as values come and go (a
    min() over the window on every step cost more than the rest of the rule)."""

    values: deque
    recent: deque  # per finite value of the window, spikes too: whether it was factor x its median
    least: float = math.inf
    peak: float = 0.0  # the highest value accepted (a spike never is): the scale the run came down from
    signed: bool = False  # a value below zero was seen: a surrogate objective, no ratio means anything
    # Values kept before ``least`` may have left the window: a value pushed leaves it ``maxlen`` pushes
    # later, so a count down from there says when min() must be taken again, where reading the value
    # about to go out on every push cost four C calls a step (issue 56).
    lasts: int = 0

    def push(self, value: float, excursion: bool) -> None:
        """A value kept in the window (a spike never is), and whether it was an excursion."""
        self.recent.append(excursion)
        values = self.values
        values.append(value)
        if value < 0.0:  # (0.0, not 0: a float against a float is the interpreter's specialised compare)
            self.signed = True
        if value > self.peak:
            self.peak = value
        if value <= self.least:
            self.least = value
            self.lasts = values.maxlen or 0
        else:
            self.lasts -= 1
            if self.lasts <= 0:
                self._renew()

    def _renew(self) -> None:
        """The least of the window again, and how long its oldest copy there stays (a newer copy of it
        renews it once more then)."""
        values = self.values
        least = self.least = min(values)
        self.lasts = (values.maxlen or 0) - len(values) + 1 + values.index(least)


class _Series(NamedTuple):
    """A rank's baselines of both metrics."""

    loss: _Baseline
    grad_norm: _Baseline


class TrainingRule:
    sources = frozenset({"nccl", "train"})

    def __init__(self, factor: float = SPIKE_FACTOR, window: int = BASELINE_STEPS) -> None:
        self.factor = factor
        self.window = window
        # job → rank → its loss and grad-norm baselines (two lookups of a str and an int cost less than a
        # (job, rank) tuple built and hashed on every step: issue 56)
        self._series: dict[str, dict[int, _Series]] = {}
        self._unanswered: dict[tuple[str, int], tuple[Envelope, str]] = {}  # a spike awaiting the next loss
        self._skipped: dict[tuple[str, int], int] = {}  # a rank's loss scaler's skipped steps in a row
        self._held_out_nan = HeldOutNan()

    def observe(self, event: Envelope) -> list[Finding]:
        if event.source == "nccl":
            return self._log(event)
        if event.kind == "step":
            return self.observe_step(event, typed(event, TrainStep))
        if event.kind == "eval":
            return self._held_out(event, typed(event, TrainEval))
        return []

    def _held_out(self, event: Envelope, evaluation: TrainEval) -> list[Finding]:
        """A held-out loss that is NaN or infinite: the model's outputs overflowed on data it did not train on (an
        fp16 evaluation's logits past 65,504) or its weights are NaN. Beside a finite training loss it is the run's
        fault no less: the loss its checkpoints are chosen by is gone (issue 54, fresh batch 27's alpaca-lora runs:
        eval_loss nan after training losses in the millions). One non-finite from its first evaluation while the
        evaluation's other metrics move is the evaluation's own arithmetic (loss_held_out_nan.py). An alert, not the stop-time checks: alone
        (the training loss finite) it can also be the evaluation's own bug (a held-out set whose every label is
        masked averages over nothing), which no machine check or rollback mends; a broken run's training loss
        says so in its own steps."""
        # Which non-finite held-out loss is the run's, not its evaluation's own arithmetic (loss_held_out_nan.py).
        metrics = evaluation.metrics or {}
        rank = evaluation.rank
        name = self._held_out_nan.alerts(event.job, rank, metrics)
        if name is None:
            return []
        where = f"rank {rank if rank is not None else '?'} on {event.node}"
        return [self._nan(event, (rank,) if rank is not None else (),
                          f"held-out {name} = {metrics[name]} at step {or_else(evaluation.step, '?')} ({where})", "alert")]

    def _log(self, event: Envelope) -> list[Finding]:
        if event.kind == "exception":
            exc = typed(event, NcclException)
            ranks = (exc.rank,) if exc.rank is not None else ()
            user = exc.user_code
            fault, action = parsed_fault(event, "user_code" if user else "unknown", "rollback" if user else "stop_time_diagnosis")
            if fault in ("nccl_error", "cuda_error"):
                return []  # the matching nccl_error / cuda_error event carries it
            if fault == "user_code":
                action = "rollback"  # never evict for a bug in the user's script
            where = f"{or_else(exc.file, '?')}:{or_else(exc.lineno, '?')} in {or_else(exc.func, '?')}"
            return [Finding(
                job=event.job, ts=event.ts, fault=fault, action=action, nodes=(event.node,), ranks=ranks,
                entity="exception", evidence=(event.id,),
                detail=f"{or_else(exc.type, 'Exception')}: {or_else(exc.message, '')} at {where}"[:300],
            )]
        if event.kind == "cuda_error":
            # The parser knows a device-side assert or a CUDA OOM is the script's bug (user_code)
            # and an ECC error the GPU's (gpu_memory): keep its class, not a blanket cuda_error.
            error = typed(event, NcclError)
            fault, action = parsed_fault(event, "cuda_error", "stop_time_diagnosis")
            if fault == "user_code":
                action = "rollback"
            rank = error.rank
            return [Finding(
                job=event.job, ts=event.ts, fault=fault, action=action, nodes=(event.node,),
                ranks=(rank,) if rank is not None else (), entity="cuda", evidence=(event.id,),
                detail=f"rank {rank if rank is not None else '?'}: {error.error or line_of(event)}",
            )]
        if event.kind == "nan":
            nan = typed(event, NcclNan)
            rank = nan.rank
            ranks = (rank,) if rank is not None else ()
            return [self._nan(event, ranks, f"rank {rank if rank is not None else '?'} on {event.node}: {line_of(event)}")]
        return []

    def _nan(self, event: Envelope, ranks: tuple[int, ...], detail: str, action: str = "stop_time_diagnosis") -> Finding:
        return Finding(
            job=event.job, ts=event.ts, fault="nan_loss", action=action, ranks=ranks,
            entity="loss", evidence=(event.id,), detail=detail,
        )

    def observe_step(self, event: Envelope, step: TrainStep) -> list[Finding]:
        """A ``train``/``step`` whose payload the caller read (the node stage's step path reads it
        once for every reader: diagnosis/engine/stages.py)."""
        rank = step.rank
        if rank is None:
            raise missing("rank", event)
        # A rank's two baselines in one place (a step is four in five node-stage messages: issue 56).
        job = event.job
        ranks = self._series.get(job)
        if ranks is None:
            ranks = self._series[job] = {}
        series = ranks.get(rank)
        if series is None:
            series = ranks[rank] = _Series(_Baseline(deque(maxlen=self.window), deque(maxlen=self.window)),
                                           _Baseline(deque(maxlen=self.window), deque(maxlen=self.window)))
        out: list[Finding] = []
        # The gate, per metric: a finite value below factor × its window's minimum cannot be factor ×
        # the window's median (no median is under the minimum), so it is no excursion and no spike;
        # nor is one below zero or of a signed series, which is never ratio-judged. For such a value
        # _judge does exactly this: keep it, no excursion. (An empty window's minimum is inf: every
        # finite value passes, as _judge's ``base and`` lets it.) tests/diagnosis/test_rules_training.py
        # holds the gated rule to _judge alone, value by value.
        factor = self.factor
        loss: float | None = None  # this step's: with one, a spike waits for the next step's
        raw = step.loss
        if raw is not None:
            value = raw if type(raw) is float else as_float(raw)
            if value is not None:
                loss = value
                # Judged only where a spike waits (rare): the medians on every step would cost the rule.
                if self._unanswered:
                    held = self._unanswered.pop((job, rank), None)
                    if held is not None and self._rose(job, rank, value, step.classes) is not False:
                        out.append(self._spike(held[0], rank, held[1], event))
                baseline = series.loss
                least = baseline.least
                if isfinite(value) and (value < factor * least or value < 0.0 or baseline.signed):
                    # _Baseline.push(value, False) inline, here and for the grad norm: two calls a step were
                    # ~1.1k instructions of its ~7.5k (issue 56). tests/diagnosis/test_training_gate.py holds
                    # the baselines so kept to push's, value by value, on every trace and curve.
                    baseline.recent.append(False)
                    baseline.values.append(value)
                    if value < 0.0:
                        baseline.signed = True
                    if value > baseline.peak:
                        baseline.peak = value
                    if value <= least:
                        baseline.least = value
                        baseline.lasts = self.window
                    else:
                        baseline.lasts -= 1
                        if baseline.lasts <= 0:
                            baseline._renew()
                else:
                    self._judge(event, step, rank, "loss", raw, value, baseline, None, out)
        raw = step.grad_norm
        if raw is not None:
            value = raw if type(raw) is float else as_float(raw)
            if value is not None:
                baseline = series.grad_norm
                least = baseline.least
                if isfinite(value) and (value < factor * least or value < 0.0 or baseline.signed):
                    baseline.recent.append(False)
                    baseline.values.append(value)
                    if value < 0.0:
                        baseline.signed = True
                    if value > baseline.peak:
                        baseline.peak = value
                    if value <= least:
                        baseline.least = value
                        baseline.lasts = self.window
                    else:
                        baseline.lasts -= 1
                        if baseline.lasts <= 0:
                            baseline._renew()
                else:
                    self._judge(event, step, rank, "grad_norm", raw, value, baseline, loss, out)
                if self._skipped and math.isfinite(value):
                    self._skipped.pop((job, rank), None)  # a loss scaler's run of skipped steps, if any, is over
        return out

    def _scaler_skipped(self, key: tuple[str, int], loss: float | None, classes: int | None) -> bool:
        """Whether a step's non-finite grad norm is an fp16 loss scaler's skipped step, counted: its loss an
        ordinary one (under factor x the median of the losses kept before it, or of a guess's, ln(classes), where
        none was: a first step's; with neither, a first loss counts as ordinary: a scaler overflows most at its
        first steps, its scale at its highest, and the next step's loss weighs this one), not SCALER_SKIPS such
        steps in a row yet."""
        losses = self._series[key[0]][key[1]].loss
        if loss is None or not math.isfinite(loss) or loss == 0.0 or losses.signed:
            return False
        before = list(losses.values)
        if before and before[-1] == loss:
            before.pop()  # this step's own loss, kept a moment ago
        if before:
            scale: float | None = statistics.median(before)
        elif classes is not None and classes >= 2:
            scale = math.log(classes)
        else:
            scale = None  # a first loss with no guess's to weigh: the steps after it say what it was
        if scale is not None and loss >= self.factor * scale:
            return False
        skips = self._skipped.get(key, 0) + 1
        if skips > SCALER_SKIPS:
            return False
        self._skipped[key] = skips
        return True

    def _judge(self, event: Envelope, step: TrainStep, rank: int, metric: str, raw: object, value: float,
               baseline: _Baseline, loss: float | None, out: list[Finding]) -> None:
        """One metric's value of a step in full: a NaN, a spike against its rank's baseline, or kept in it."""
        if not math.isfinite(value):
            if metric == "grad_norm" and self._scaler_skipped((event.job, rank), loss, step.classes):
                return
            out.append(self._nan(event, (rank,), f"{metric} = {raw} at step {or_else(step.step, '?')} (rank {rank} on {event.node})"))
            return
        base = baseline.values
        recent = baseline.recent
        # A loss that has gone below zero is no cross-entropy but a surrogate (a policy gradient's,
        # GRPO's, a contrastive margin's) that sits around 0 and changes sign: 0.03 after a run of
        # 3.5e-5 is 864x its median and no spike (issue 54, fresh batch 1). Ratios need a positive scale.
        # An excursion (factor x the median of its time) is what the rarity of a spike counts, from
        # the series' first values on: a per-sample loss shows its tail before a baseline is whole.
        excursion = False
        if base and not baseline.signed and value >= 0 and value >= self.factor * baseline.least:
            med, sigma = robust_sigma(base)
            floor = max(sigma, 0.01 * abs(med), 1e-12)
            guess = math.log(step.classes) if metric == "loss" and step.classes and step.classes >= 2 else 0.0
            least_rise = max(SPIKE_OF_SCALE * max(baseline.peak, guess), LOSS_RESOLUTION if metric == "loss" else 0.0)
            excursion = med > 0 and value >= self.factor * med
            if (excursion and len(base) >= (self.window if metric == "loss" else MIN_BASELINE)
                    and value - med >= SPIKE_SIGMAS * floor
                    and value - med >= least_rise and sum(recent) < SPIKE_ROUTINE
                    and sum(v * SPIKE_NEAR >= value for v in base) < SPIKE_ROUTINE):
                recent.append(True)  # (and the value is not kept)
                detail = (f"{metric} {value:.4g} at step {or_else(step.step, '?')} is {value / med:.1f}× the "
                          f"median {med:.4g} of the last {len(base)} steps (rank {rank} on {event.node})")
                # The next step's loss decides (a loss spike of the same step keeps its place).
                if metric == "loss":
                    self._unanswered[(event.job, rank)] = (event, detail + " and the next loss stayed up")
                elif loss is not None:
                    self._unanswered.setdefault((event.job, rank), (event, detail + " and the loss rose with it"))
                else:
                    out.append(self._spike(event, rank, detail))
                return  # a spike must not drag the baseline up
        baseline.push(value, excursion)

    def _rose(self, job: str, rank: int, loss: float, classes: int | None) -> bool | None:
        """Whether a loss stands past its own noise above its baseline, by as much of its scale as a
        loss spike must (None: no baseline yet, or a non-finite loss, which the NaN finding carries)."""
        series = self._series.get(job, {}).get(rank)
        baseline = series.loss if series is not None else None
        if baseline is None or len(baseline.values) < MIN_BASELINE or not math.isfinite(loss):
            return None
        med, sigma = robust_sigma(baseline.values)
        guess = math.log(classes) if classes and classes >= 2 else 0.0
        return loss - med >= max(ANSWER_SIGMAS * max(sigma, 0.01 * abs(med), 1e-12),
                                 SPIKE_OF_SCALE * max(baseline.peak, guess), LOSS_RESOLUTION)

    @staticmethod
    def _spike(event: Envelope, rank: int, detail: str, answer: Envelope | None = None) -> Finding:
        return Finding(
            job=event.job, ts=(answer or event).ts, fault="loss_spike", action="stop_time_diagnosis", ranks=(rank,),
            entity="loss", evidence=(event.id,) if answer is None else (event.id, answer.id),
            detail=detail,
        )

    def tick(self, now: float) -> list[Finding]:
        return []
