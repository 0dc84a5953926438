"""A loss frozen batch by batch: the stalled-loss detector's cyclic form of "frozen" (docs/design.md §3), beside
its other frozen forms: a whole window at one value (window_frozen), a short log's printed digits alike
(printed_frozen) and a loss at exactly 0 straight from its level or from a blow-up (zeroed_at_once), or from
the run's first log with its held-out loss at 0 too (zero_from_the_start).

A model whose weights no longer move answers every input as it did before. Fed the same batches in the
same order each epoch (no shuffling, a fixed validation-like split, a full-batch physics loss), its
per-step loss is then a cycle: each batch at its own value, the same to five digits epoch after epoch,
however far apart the batches are. The flat "frozen" test (one value over the window) misses it, and so
does "never learned" when the first step is the highest batch's (issue 54, fresh batch 8: an EEG-to-fMRI
decoder whose 4 batches sit at 2.89e8, 2.88e8, 2.55e8 and 2.11e8 for 68 epochs, every window's median 6 %
below its first step). No step event carries a batch index or an epoch length: the period is found from
the losses themselves, the shortest after which every value repeats.

A learning run never repeats to five digits: its batches' losses fall, or its shuffled batches differ
from epoch to epoch. A run whose schedule has decayed its learning rate to nothing may, and is left to the
flat test's judgement (a converged run at the end of its schedule is no fault).
"""

from __future__ import annotations

import itertools
import math
import statistics
from decimal import Decimal
from itertools import islice

from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict
from faultlens.diagnosis.rules.loss_eval import CHANCE

FROZEN = 1e-6  # relative spread of a window whose loss no longer changes: "to 6 digits"
CYCLE_DIGITS = 1e-5  # each batch's loss within this share of its level across the window: "to 5 digits"
MIN_CYCLES = 3  # the window holds at least this many whole periods: one repeat is a coincidence
# The batches differ by ten times that at least: a loss flat to within a few times the tolerance splits
# into short interleaved series that each fit it by chance (a PINN drifting 1.7e-5 of its level over 20
# epochs fits "every 3 steps": issue 54, fresh batch 7). One flat value is the flat test's (FROZEN).
DISTINCT = 10.0
# Before the first whole window: a loss the same to its printed digits at this many logs in a row (a quarter of the
# shortest window), printed finely enough (to this share of its level) that a moving one would show it.
REPEATS = 5
PRINTED = 1e-3
# ...or this many, at a uniform guess's loss from a trained model, where each of them says a learning rate above zero
# and none above the one before: the optimizer steps at or past its peak rate (no warm-up), so each log's loss is a
# moved model's, and a trained model that answers a guess exactly while it moves has lost what it knew.
STEPPING_REPEATS = 3
# A blow-up the loss cannot come down from in one log: ten times the highest loss of the run before it.
BLOWN_UP = 10.0


def frozen_period(values: list[float], tolerance: float = CYCLE_DIGITS) -> int | None:
    """The shortest period ``p`` of at least 2 (at most a third of the window) after which every value of
    ``values`` repeats within ``tolerance`` of its level: each of the ``p`` interleaved series (every
    ``p``-th value, one batch's losses epoch after epoch) spreads by no more, while the batches differ from
    each other by ``DISTINCT`` times as much. None when no period does, or when the values are at or
    around zero (a share of zero says nothing)."""
    n = len(values)
    for p in range(2, n // MIN_CYCLES + 1):
        # The first value's repeat a period on rules out nearly every period at once: a window of 2,000
        # steps is judged every 200, and a learning curve's periods all fail here.
        if abs(values[p] - values[0]) > 2 * tolerance * abs(values[0]):
            continue
        series = [values[k::p] for k in range(p)]
        if not all(_steady(s, tolerance) for s in series):
            continue
        levels = [statistics.median(s) for s in series]
        if max(levels) - min(levels) > DISTINCT * tolerance * abs(statistics.median(levels)):
            return p
    return None


def _steady(series: list[float], tolerance: float) -> bool:
    level = abs(statistics.median(series))
    return level > 0 and max(series) - min(series) <= tolerance * level


def printed_frozen(curve: LossCurve) -> Verdict | None:
    """The latest :data:`REPEATS` losses one value, to every digit the trainer printed, those digits fine enough
    (a step of the last one at most :data:`PRINTED` of the level) that a loss still moving would have changed
    them: weights that no longer change (issue 54, fresh batch 18: fp16 pretraining at 54.69 from its 2nd to its
    7th log of 8, after an overflow). A Keras loss printed to 4 decimals at 0.0266 (a step of 0.4 % of it) says
    less, and is left to the window (fresh batch 5); so is a schedule decayed to nothing (a converged run). At a
    uniform guess's loss from a trained model, :data:`STEPPING_REPEATS` logs will do while the optimizer steps at or
    past its peak rate (:func:`_stepping`)."""
    held = list(islice(reversed(curve.losses), REPEATS))
    alike = next((n for n, (_, v) in enumerate(held) if v != held[0][1]), len(held))
    latest = held[:alike][::-1]
    if alike < STEPPING_REPEATS or abs(latest[0][1]) <= 1e-3 or curve.schedule_decayed():
        return None
    level = latest[0][1]
    # At a guess's loss, ln(classes), a loss repeats while the weights move (a uniform output scores it on every
    # batch: fresh batch 4's AdaGrad at 2.3026 for 19 logs from random weights, then learning): the window's "at
    # chance" judges it. Not a model the trainer says was trained: it never answers uniformly, and one that does for
    # 5 logs has lost what it knew (fresh batch 22's MiniGPT-4 fine-tune at 10.3750, ln 32000 as fp16 prints it), or
    # for 3 while its optimizer steps at or past its peak rate (:func:`_stepping`). Nor a run whose own curve left the
    # guess after its first log (:func:`_left_the_guess`): it is no longer the random model, whatever its start.
    guess = math.log(curve.classes) if curve.classes is not None else None
    at_chance = guess is not None and abs(level - guess) <= CHANCE * guess
    left = guess is not None and at_chance and _left_the_guess(curve, guess)
    if at_chance and curve.from_scratch is not False and not left:
        return None
    if alike < REPEATS and not (at_chance and _stepping(curve, [s for s, _ in latest])):
        return None
    if not _printed_finely(level):
        return None
    said = ""
    if at_chance:
        said = (f", a uniform guess's ln({curve.classes}) from a trained model" if curve.from_scratch is False else
                f", a uniform guess's ln({curve.classes}) after the run was down at {curve.low_since_first:.6g}")
    return Verdict(f"loss {level:.6g} at every digit printed for {alike} logs (steps {latest[0][0]}-"
                   f"{latest[-1][0]}){said}: the weights no longer change", rollback=False)


def _left_the_guess(curve: LossCurve, guess: float) -> bool:
    """Whether the run has shown a loss below a uniform guess's by more than :data:`CHANCE` of it after its first log:
    its own curve says the model since then scored better than a guess, so it is no longer the untrained one. The first
    log is the model the run was first seen as, and a random model's batch may score below the guess by luck (the
    fixture folder's binary TensorFlow run, 0.6773 against ln 2 at step 0). From random weights, a loss back at the
    guess to every printed digit after such a log has lost what it learned, as a trained model's has (issue 54, fresh
    batch 34's Network-in-Network on CIFAR-10 at lr 0.1: 2.303, 2.290, 2.234, then 2.302585 = ln 10 at every line of
    epochs 2-4); a run that never left the guess is still the untrained model (fresh batch 4's AdaGrad, 2.3114 then
    2.3026 for 19 logs, then learning)."""
    return curve.low_since_first < (1.0 - CHANCE) * guess


def _stepping(curve: LossCurve, steps: list[int]) -> bool:
    """Whether each of ``steps`` said a learning rate above zero and none above the one before it: the optimizer moves
    the weights at its peak rate or past it, each loss logged a moved model's. A DPO starts at ln 2 by construction
    (its policy is its reference) and prints it while a warm-up's rate rises from zero (fresh batch 23's healthy fp16
    LoRA: 0.6931 at its first 4 logs, rate 0, 0, 0, 5e-06, then learning to 0.2); one still there to every digit at a
    falling rate has a policy that does not move off its reference (fresh batch 23's Llama DPO, 0.6932 at 1.37e-05;
    fresh batch 32's, 0.6931 at 9.99e-06, every reward 0.0 in both)."""
    said = dict(islice(reversed(curve.lrs), len(steps) + 1))
    rates = [said[s] for s in steps if s in said]
    return (len(rates) == len(steps) and all(r > 0 for r in rates)
            and all(later <= earlier for earlier, later in itertools.pairwise(rates)))


def printed_unit(value: float) -> float:
    """The size of ``value``'s last printed digit (infinite where it cannot be read). Trailing zeros never count, as a
    trainer's "4.600" reaches us as 4.6: a whole number's ".0" is Python's repr, and 30.0 is known to its tens (a
    hand-written trace's constant loss 2.0 is not a loss known to a tenth)."""
    text = repr(value)
    number = Decimal(text)
    exponent = (number.normalize() if text.endswith(".0") else number).as_tuple().exponent
    return 10.0**exponent if isinstance(exponent, int) else math.inf


def _printed_finely(value: float) -> bool:
    """Whether ``value``'s last printed digit is at most :data:`PRINTED` of it: a loss moving by more shows."""
    unit = printed_unit(value)
    return unit != math.inf and unit <= PRINTED * abs(value)


def _printed_coarsely(values: list[float], level: float) -> bool:
    """Whether any of a window's losses is printed to a last digit over :data:`PRINTED` of the window's level: a log
    that rounds its loss to a fixed count of decimals prints a small loss with one or two significant digits, and a
    loss still falling by a few per cent a window shows the same digits at every log of it (issue 54, fresh batch 48's
    PaiNN regressions printed to 4 decimals: 0.002 over their last 20 epochs, 0.0033 then 0.0027, while their held-out
    L1 falls at each epoch). A window alike to 6 digits says the weights no longer change only where 6 digits, or 3,
    were printed (fresh batch 48's blown-up PaiNN, 3.194e31 to 5 digits at each of 621 epochs)."""
    return any(not _printed_finely(v) for v in values)


def zeroed_at_once(curve: LossCurve) -> Verdict | None:
    """The latest :data:`REPEATS` losses exactly 0, straight from the level the run was at: the losses held before
    them away from zero (their median above 1e-3) and the last of them printed finely enough (:func:`_printed_finely`)
    that a loss coming down would have shown on its way. No model learns from 1.4138 to under its log's last digit
    between two logs: a loss at 0 from there on has scored none of its targets (every label masked, as a chat
    template whose tokens disagree with the labels' does: haotian-liu/LLaVA#375's "most issues of loss=0"; issue 54,
    fresh batch 20's Mini-Gemini stage 2, 1.4138 then 0.0 for 9 logs while its warm-up raises the rate). A run that
    learned its way to zero prints its way down (fresh batch 5's CLIP LoRA 0.015, 0.0084, 0.0036, then 0.0; fresh
    batch 2's classifier 0.0001), and one whose loss went below zero (a surrogate) has no floor there. The latest loss
    alone will do straight after a blow-up (:func:`_zeroed_after_blow_up`)."""
    latest = list(islice(reversed(curve.losses), REPEATS + 1))
    if len(latest) > 1 and latest[0][1] == 0.0 and not curve.signed:
        verdict = _zeroed_after_blow_up(curve)
        if verdict is not None:
            return verdict
    if len(latest) <= REPEATS or curve.signed or any(v != 0.0 for _, v in latest[:REPEATS]):
        return None
    came_from, before = latest[REPEATS]
    if before == 0.0 or not _printed_finely(before):
        return None
    held = [v for _, v in curve.losses]
    if abs(statistics.median(held[:-REPEATS])) <= 1e-3:
        return None
    return Verdict(f"loss 0 at every digit printed for {REPEATS} logs (steps {latest[REPEATS - 1][0]}-{latest[0][0]}), "
                   f"straight from {before:.6g} at step {came_from}: no target is scored", rollback=False)


def zero_from_the_start(curve: LossCurve, held_out: dict, watched_from_start: bool) -> Verdict | None:
    """Every loss exactly 0 from the first log the run showed, watched from its start (``watched_from_start``), at
    :data:`STEPPING_REPEATS` logs at least, while every held-out loss it evaluated (``held_out``: its held-out losses'
    ``(step, value, higher)`` by name, loss_eval.HeldOutWatch.held_losses) is exactly 0 too: no model learns its
    training and held-out data to under its logs' last digit before it has trained, so the losses score nothing,
    not a fit (a single class, every target masked). Issue 54, fresh batch 33's Inception-v1 classifier: train loss
    0.000000 at steps 0, 10 and 20 and held-out loss 0.000000 with accuracy 1 at steps 0 and 20. A policy-gradient
    surrogate sits at 0 from its start while it learns (its advantages sum to 0 in each group: fresh batch 21's GRPO,
    loss 0.0 at its first logs as its reward rises), with no held-out loss to say the same; a held-out loss above
    0 says the data is scored; a run first seen later at 0 may have fitted it (:func:`zeroed_at_once` reads a loss
    that comes to 0 from its level)."""
    if not watched_from_start or curve.signed or curve.peak != 0.0 or curve.seen < STEPPING_REPEATS:
        return None
    evaluated = [value for kept in held_out.values() for _, value, _ in kept]
    if not evaluated or any(value != 0.0 for value in evaluated):
        return None
    return Verdict(f"loss 0 at every log from the first ({curve.seen} logs, steps {curve.first_step}-"
                   f"{curve.losses[-1][0]}) and held-out loss 0 at every evaluation so far ({len(evaluated)}), from "
                   f"the run's start: nothing is scored", rollback=False)


def _zeroed_after_blow_up(curve: LossCurve) -> Verdict | None:
    """A loss at exactly 0 at the log straight after a blow-up: the log before it :data:`BLOWN_UP` times every one of
    the :data:`REPEATS` or more held before that (away from zero, printed finely). A model does not go from the
    highest loss of its run to under its log's last digit between two logs; it broke, and scores nothing from there
    (a Trainer logs 0 for a logging window whose every step was NaN). Issue 54, fresh batch 28: a chat LoRA at
    1.26-1.32 for 12 logs, then 34,023.79, then 0.0. One 0 from a level is a batch whose targets were all masked
    (:func:`zeroed_at_once` waits for 5); a batch-size-1 loss that swings 10x and touches 0 came down from no such
    height (fresh batch 4's crystal-graph transformer: 1.85, 0.12, 0.56, then 0.0)."""
    held = [v for _, v in curve.losses]
    blown, before = held[-2], held[:-2]
    if len(before) < REPEATS or not _printed_finely(blown) or min(before) <= 1e-3 or blown < BLOWN_UP * max(before):
        return None
    return Verdict(f"loss 0 at every digit printed at step {curve.losses[-1][0]}, straight after {blown:.6g} at step "
                   f"{curve.losses[-2][0]}, {blown / max(before):.0f}x every loss before it: the run blew up and "
                   f"scores nothing", rollback=False)


def window_frozen(curve: LossCurve, values: list[float], level: float, over: str) -> Verdict | None:
    """A whole window's frozen forms: one value to 6 digits (:data:`FROZEN`), or the same batches' values to 5
    digits cycle after cycle (:func:`frozen_period`), not where the schedule has decayed to nothing (a converged
    run at the end of its schedule). Nothing at or around zero: a share of zero says nothing. Nor a window printed
    coarsely (:func:`_printed_coarsely`): its digits cannot show the weights move (loss round 49)."""
    if level <= 1e-3:
        return None
    if max(values) - min(values) <= FROZEN * abs(level):
        if _printed_coarsely(values, level):
            return None
        return Verdict(f"loss frozen at {level:.6g} over {over}: the weights no longer change", rollback=False)
    period = frozen_period(values) if not curve.schedule_decayed() else None
    if period is None or _printed_coarsely(values, level):
        return None
    return Verdict(f"loss frozen batch by batch over {over}: every {period} steps it repeats its values "
                   f"({min(values):.5g}-{max(values):.5g}) to 5 digits: the weights no longer change", rollback=False)
