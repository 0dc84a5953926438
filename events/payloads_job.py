"""Payload Structs of what the training job and the checks report: sources ``nccl``, ``train``,
``heartbeat``, ``stack`` and ``check`` (docs/events.md; the rules every field follows:
events/payload_fields.py). A documented key typed ``Any`` is one no check ever refused: listed so
a reader finds it, read as it was sent.
"""

from __future__ import annotations

import re
from typing import Any

from faultlens.events.payload_fields import (
    Flag,
    Int,
    Metric,
    Metric64,
    NonNeg,
    NonNeg64,
    NonNegInt,
    NonNegInt64,
    Number,
    Object,
    Payload,
    RankedPayload,
    Text,
)
from faultlens.events.payloads_log import ParsedLog

# --- source `nccl` (parsing/trainer_log.py; the kinds a catalogue rule makes: events/payloads_log.py)


class NcclTimeout(ParsedLog, frozen=True):
    """``nccl``/``nccl_timeout``: the ProcessGroupNCCL watchdog fired (``numel_in`` / ``numel_out``:
    the collective's sizes, where the watchdog's line gives them)."""

    seq: Int | None = None
    op: Any = None
    timeout_ms: NonNeg | None = None
    elapsed_ms: NonNeg | None = None
    last_enqueued: Int | None = None
    last_completed: Int | None = None
    numel_in: NonNegInt | None = None
    numel_out: NonNegInt | None = None


class NcclError(ParsedLog, frozen=True):
    """``nccl``/``nccl_error`` and ``nccl``/``cuda_error``: a NCCL or CUDA error a rank logged."""

    error: Any = None


class NcclException(ParsedLog, frozen=True):
    """``nccl``/``exception``: a Python traceback's innermost user frame (``headless``: the exception
    line alone; ``truncated``: its exception line never came; ``judged_by`` / ``errno``: what
    parsing/exceptions.toml judged it by)."""

    user_code: Flag | None = None
    type: Any = None
    message: Any = None
    file: Text | None = None
    func: Text | None = None
    lineno: Int | None = None
    frames: NonNegInt | None = None
    error: Any = None
    truncated: Flag | None = None
    headless: Flag | None = None
    errno: Text | None = None
    judged_by: Text | None = None


class NcclNan(ParsedLog, frozen=True):
    """``nccl``/``nan``: a NaN / inf message in the log (``step``: where the line names it)."""

    step: NonNegInt | None = None


# --- source `train` (trainer_hooks) -----------------------------------------------------------


class TrainStep(RankedPayload, frozen=True):
    """``train``/``step``: one rank's training step. ``loss`` and ``grad_norm`` may be non-finite
    (``"nan"`` on the wire: events.envelope.number); read them with events.envelope.as_float.
    ``from_scratch``: the trainer's word that the weights began random (true) or from a checkpoint
    or a pretrained model (false), so a resumed or fine-tuned run is never read as one that never
    learned (diagnosis/rules/loss_stalled.py). ``lr``: the optimizer's learning rate, so a loss that
    rises after the schedule raised it (a warm restart) is not read as a regression. ``chance_loss``:
    the loss of the best answer that ignores the input, where the trainer knows it (the entropy of its
    labels' distribution, in nats: a class prior), so a loss stuck there is read as learning nothing of
    the input though it sits below ln(classes). ``work``: how
    much work this rank did in the step, in a unit the same for every rank of the job (tokens routed
    to its experts, samples or tokens in its micro-batches), so that a rank slower because it had
    more to do (a hot expert) is not read as a slow machine (diagnosis/peers/slow_work.py). ``loss_steps``:
    where the loss is the trainer's logged mean over this many optimizer steps (ending at this one), not the
    step's own (the Hugging Face callback's, for a loss made outside the model's forward). Every int
    is bounded to 64 bits (events/payload_fields.py ``Int64``): msgspec also reads
    a step straight from its bytes into this Struct (events/step_reading.py), and the two readings must
    agree."""

    rank: NonNegInt64 | None = None  # RankedPayload's, bounded as the rest
    step: NonNegInt64 | None = None
    loss: Metric64 | None = None
    grad_norm: Metric64 | None = None
    step_time_s: NonNeg64 | None = None
    compute_s: NonNeg64 | None = None
    tokens: NonNeg64 | None = None
    tokens_per_s: NonNeg64 | None = None
    mfu: NonNeg64 | None = None
    classes: NonNegInt64 | None = None
    from_scratch: Flag | None = None
    lr: NonNeg64 | None = None
    work: NonNeg64 | None = None
    chance_loss: NonNeg64 | None = None
    loss_steps: NonNegInt64 | None = None


# Names of a correlation metric (Spearman's rho, Pearson's r, Kendall's tau): higher is better, and a model
# that ignores its input scores 0 (trainer_hooks/callback_support.eval_chance).
CORRELATIONS = ("spearman", "pearson", "kendall", "corrcoef", "correlation")


def correlation(name: str) -> bool:
    """Whether a metric's name says it is a correlation between predictions and targets."""
    lowered = name.lower()
    return any(word in lowered for word in CORRELATIONS)


def determination(name: str) -> bool:
    """Whether a metric's name says it is a coefficient of determination, the share of the target's variance
    the predictions explain (``val_r2``, ``r2_score``, ``r_squared``, ``explained_variance``): higher is better,
    and predicting the target's mean scores 0 (trainer_hooks/callback_support.eval_chance). By whole words, so
    that a name that merely holds an ``r2`` (``conv_r2x``) is not one."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    joined = "_".join(words)
    return ("r2" in words or "rsquared" in words or "r_squared" in joined or "explained_variance" in joined
            or "determination" in words)


def area_under_roc(name: str) -> bool:
    """Whether a metric's name says it is an area under the ROC curve (``val_auc``, ``roc_auc``, ``auroc``): higher
    is better, and scores that ignore the input rank a positive above a negative half the time, 0.5, whatever the
    class count or prior (trainer_hooks/callback_support.eval_chance). By whole words, as :func:`determination`
    (``pr_auc``, the area under precision-recall, is the positives' share by chance: not one)."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    return ("auc" in words or "auroc" in words or "rocauc" in words) and "pr" not in words and "prauc" not in words


class TrainEval(RankedPayload, frozen=True):
    """``train``/``eval``: one rank's evaluation on held-out data after ``step`` (the HF callback's
    on_evaluate, the Lightning callback's validation end, ``TrainerHook.eval``). ``metrics``: name to
    value (non-finite ones as for a step's loss); ``chance``: a metric's value for a model that ignores
    its input (ln(classes) or the class prior's entropy for a loss, 1/classes or the majority label's
    share for an accuracy, 0 for a correlation, 0.5 for an ROC AUC), so a held-out metric that stays there is read as a run that
    learned nothing of its task (diagnosis/rules/loss_eval.py); ``higher_is_better``: a metric's direction
    where its name does not say it (a name with ``loss`` is lower-is-better, one with ``acc``, a
    correlation's name, :data:`CORRELATIONS`, an R²'s, :func:`determination`, or an ROC AUC's,
    :func:`area_under_roc`, higher)."""

    step: NonNegInt | None = None
    metrics: dict[Text, Metric] | None = None
    chance: dict[Text, Number] | None = None
    higher_is_better: dict[Text, Flag] | None = None

    @staticmethod
    def direction(name: str, said: dict[str, bool] | None = None) -> bool | None:
        """Whether a higher ``name`` is better: the trainer's word (``said``), else its name's (``loss``
        lower, ``acc``, a correlation's or an R²'s name higher); None: not known, so never judged against its chance."""
        if said and name in said:
            return said[name]
        lowered = name.lower()
        if "loss" in lowered:
            return False
        return True if "acc" in lowered or correlation(lowered) or determination(lowered) or area_under_roc(lowered) \
            else None


class TrainCheckpoint(RankedPayload, frozen=True):
    """``train``/``checkpoint``: a checkpoint was saved (the rollback target)."""

    step: NonNegInt | None = None
    path: Any = None


class CommandAck(RankedPayload, frozen=True):
    """``train``/``command_ack`` (the trainer hook) and ``check``/``command_ack`` (the node agent's
    refusal, ``rank`` null): a receiver's answer to a command (events.command_screen.ack_payload);
    ``command_id`` / ``action`` null for a message that did not parse; ``addressed: false``: the
    command was for another job, node or rank."""

    command_id: Text | None = None
    action: Text | None = None
    obeyed: Flag | None = None
    reason: Text | None = None
    addressed: Flag | None = None


# --- source `heartbeat` (collectors/heartbeat.py) ---------------------------------------------


class HeartbeatBeat(Payload, frozen=True):
    """``heartbeat``/``beat``: the node agent is alive; its training pids and its own health."""

    seq: Int | None = None
    pids: list[Int | None] | None = None
    sources: Object | None = None
    unranked_pids: list[Int | None] | None = None
    health: Object | None = None
    stopping: Any = None


# --- source `stack` (collectors/stacks.py, trainer_hooks/flight_recorder.py) ------------------


class StackDump(RankedPayload, frozen=True):
    """``stack``/``stack_dump``: one rank's py-spy or faulthandler dump (or the error text)."""

    pid: Int | None = None
    dump: Text | None = None
    timed_out: Flag | None = None
    request_id: Any = None
    tool: Any = None
    ok: Any = None


class RecorderDump(RankedPayload, frozen=True):
    """``stack``/``recorder_dump``: one rank's Flight Recorder dump (events/flight_recorder.py)."""

    pid: Int | None = None
    dump: Text | None = None
    entries: NonNegInt | None = None
    truncated: Flag | None = None
    request_id: Any = None


# --- source `check` (collectors/checks.py, remediation's replay) ------------------------------


class CheckItem(Payload, frozen=True):
    """One check of a ``check``/``result``: its ``name`` and whether it ``passed`` are required."""

    name: Text
    passed: Flag
    skipped: Flag | None = None
    inconclusive: Flag | None = None
    detail: Text | None = None
    duration_s: NonNeg | None = None


class CheckResult(Payload, frozen=True):
    """``check``/``result``: one node's answer to a ``run_checks`` command."""

    request_id: Text | None = None
    passed: Flag | None = None
    failed: list[Text | None] | None = None
    checks: list[CheckItem | None] | None = None
    duration_s: NonNeg | None = None
    diagnosis_id: Any = None


class CheckReplay(Payload, frozen=True):
    """``check``/``replay``: one replay group's run."""

    command_id: Text | None = None
    phase: Text | None = None
    group: NonNegInt | None = None
    nodes: list[Text | None] | None = None
    reproduced: Flag | None = None
    diagnosis_id: Any = None


class CheckReplayDone(Payload, frozen=True):
    """``check``/``replay_done``: every replay group ran."""

    command_id: Text | None = None
    failing_horizontal: list[NonNegInt | None] | None = None
    failing_vertical: list[NonNegInt | None] | None = None
    diagnosis_id: Any = None
