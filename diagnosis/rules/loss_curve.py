"""The state the stalled-loss detector keeps of one job's loss curve (diagnosis/rules/loss_stalled.py),
and the verdict it reaches on it."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

MAX_WINDOW = 2000


@dataclass(slots=True)
class LossCurve:
    """One job's loss curve, as one rank reports it."""

    rank: int
    losses: deque = field(default_factory=lambda: deque(maxlen=MAX_WINDOW))  # (step, loss)
    first: float | None = None  # the untrained model's loss
    first_step: int | None = None  # the step it was seen at: near 0 only when the run was watched from its start
    intervals: deque = field(default_factory=lambda: deque(maxlen=64))
    last_ts: float | None = None
    seen: int = 0
    next_check: int = 0
    best: float = math.inf
    best_step: int | None = None  # the last step of the window whose median was the best
    best_from: int | None = None  # and its first
    highest: float = -math.inf  # the highest median of a judged window: the level the run has come back from
    classes: int | None = None
    chance_loss: float | None = None  # the trainer's class prior: the loss of answering without the input
    from_scratch: bool | None = None  # the trainer's word: weights began random (True) or trained (False)
    grad_early: list[float] = field(default_factory=list)
    grad_zero_since: int | None = None
    grad_zero_run: int = 0
    checkpoints: list[int] = field(default_factory=list)
    signed: bool = False  # a loss below zero was seen: a surrogate objective, whose rise is no divergence
    peak: float = 0.0  # the highest loss seen: the scale the run came down from
    lrs: deque = field(default_factory=lambda: deque(maxlen=MAX_WINDOW))  # (step, lr) where the step said
    best_lr: float | None = None  # the learning rate over the best window
    # The job's held-out metric left chance at its latest evaluation (loss_eval.py): the run learned
    # something that generalises, whatever the shape of its training loss says.
    held_out_learned: bool = False
    # Its held-out loss has not stopped falling (loss_eval.HeldOutWatch.falling): the model still learns
    # what generalises, whatever plateau its training loss shows.
    held_out_falling: bool = False
    # Its held-out loss may be leaving chance (loss_eval.HeldOutWatch.leaving): a training loss at a guess's
    # is no stall yet.
    held_out_leaving: bool = False
    fired: bool = False
    # The stride (loss_stalled._stride) as of ``stride_seen`` points: a median over the whole held curve,
    # asked up to three times a judgement, the same until the next point (a 24,000-step curve's replay spent
    # 6 of its 14 s on it).
    stride: float = 1.0
    stride_seen: int = -1


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a curve is stalled: the detail line and whether a rollback would help."""

    why: str
    rollback: bool
