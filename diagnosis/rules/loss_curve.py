"""The state the stalled-loss detector keeps of one job's loss curve (diagnosis/rules/loss_stalled.py),
and the verdict it reaches on it."""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

from faultlens.diagnosis.rules.loss_plateau import lr_decayed

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
    grad_came_back: bool = False  # a run of zero gradients ended: the weights moved again (loss_gradient.py)
    checkpoints: list[int] = field(default_factory=list)
    signed: bool = False  # a loss below zero was seen: a surrogate objective, whose rise is no divergence
    peak: float = 0.0  # the highest loss seen: the scale the run came down from
    lowest: float = math.inf  # the lowest loss seen: what the run had learned (loss_chance.collapsed)
    low_since_first: float = math.inf  # the lowest loss after its first (loss_worse_than_start.worse_than_first_seen)
    at_guess: int = 0  # losses in a row within a tenth of ln(classes), the latest among them (loss_chance.collapsed)
    exact_guess: int = 0  # losses in a row at ln(classes) to a ten-thousandth of it, the latest among them (the same)
    above_guess: int = 0  # losses in a row over ln(classes) by more than a tenth of it, the latest among them (the same)
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
    # How many held losses follow the one before by each step gap, kept as losses come and go: the stride
    # (a median of the gaps over the whole held curve) read at each judgement without sorting 2,000 gaps (a
    # 19,560-step curve's replay spent half its time on that median and the learning rate's peak).
    gaps: Counter = field(default_factory=Counter)
    # The held learning rates' running maxima, each after every later one it outlived (falling): the
    # peak of ``lrs`` at its head, kept as rates come and go.
    lr_tops: deque = field(default_factory=deque)
    lr_count: int = 0  # learning rates said so far: each one's number places it in or out of ``lrs``

    def hold(self, step: int, loss: float) -> None:
        """Keep a loss at its step, the oldest dropped past :data:`MAX_WINDOW`, and the gaps with it."""
        held, gaps = self.losses, self.gaps
        if held:
            if len(held) == held.maxlen:
                gone = held[1][0] - held[0][0]
                gaps[gone] -= 1
                if not gaps[gone]:
                    del gaps[gone]  # a gap no held loss follows is out of the median
            gaps[step - held[-1][0]] += 1
        held.append((step, loss))

    def stride(self) -> float:
        """The median step gap between the held losses (a trainer that logs every 50th step: 50), 1 at least."""
        n = self.gaps.total()
        if n == 0:
            return 1
        ordered = sorted(self.gaps.items())

        def nth(i: int) -> float:
            for gap, count in ordered:
                if i < count:
                    return gap
                i -= count
            raise IndexError(i)

        middle = nth(n // 2) if n % 2 else (nth(n // 2 - 1) + nth(n // 2)) / 2
        return max(1, middle)

    def hold_lr(self, step: int, lr: float) -> None:
        """Keep a learning rate at its step, the oldest dropped past :data:`MAX_WINDOW`, and the peak with it."""
        self.lrs.append((step, lr))
        self.lr_count += 1
        tops = self.lr_tops
        while tops and tops[-1][1] <= lr:
            tops.pop()
        tops.append((self.lr_count, lr))
        while tops[0][0] <= self.lr_count - len(self.lrs):
            tops.popleft()

    def latest_lr(self) -> float | None:
        """The learning rate the latest step said; None where the steps said none."""
        return self.lrs[-1][1] if self.lrs else None

    def lr_peak(self) -> float | None:
        """The highest held learning rate; None where the steps said none."""
        return self.lr_tops[0][1] if self.lr_tops else None

    def schedule_decayed(self) -> bool:
        """Whether the learning rate said last has decayed far below the highest held (loss_plateau.lr_decayed):
        a schedule near its end. False where the steps said none."""
        return lr_decayed(self.latest_lr(), self.lr_peak())


def middle(ordered: list) -> float:
    """The median of a sorted list, as statistics.median gives it (which sorts again and checks its input first)."""
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def block_medians(window: list[tuple[int, float]], blocks: int) -> tuple[list[float], list[float]]:
    """The window's ``blocks`` equal blocks (a remainder at its end left out): each one's median step and median loss,
    the points its trend is judged by. Each block is sorted once: the judge runs every tenth of a window, and its
    block medians were a fifth of a replay's time through statistics.median."""
    per = len(window) // blocks
    parts = [window[i * per:(i + 1) * per] for i in range(blocks)]
    return [middle(sorted([s for s, _ in b])) for b in parts], [middle(sorted([v for _, v in b])) for b in parts]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a curve is stalled: the detail line and whether a rollback would help."""

    why: str
    rollback: bool
