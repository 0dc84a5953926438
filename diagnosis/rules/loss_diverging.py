"""A loss coming apart: the diverging form of ``loss_stalled`` (diagnosis/rules/loss_stalled.py), in its
own module so that each reads as one judgement (docs/design.md §3)."""

from __future__ import annotations

import math
import statistics
from itertools import islice, pairwise

from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict, middle
from faultlens.diagnosis.rules.loss_cycle import BLOWN_UP, REPEATS
from faultlens.diagnosis.rules.loss_trend import mann_kendall_z
from faultlens.diagnosis.rules.training import robust_sigma

REGRESS_NOISE = 3.0  # robust sigmas of the window's losses that what it learned must exceed
LR_RAISED = 0.25  # a learning rate this share above the run's: the schedule raised it (a warm restart)
# Diverging: the window's losses, in up to 50 block medians (each step where the window is short),
# climb by a Mann-Kendall trend this many sigmas above none (one-sided p 0.006); the median of its later
# half rises a quarter above its earlier half's and by a tenth of the run's scale (the highest loss it
# has shown, or a guess's), and ends above where the run was first seen.
DIVERGE_BLOCKS = 50
DIVERGE_Z = 2.5
DIVERGE_RISE = 0.25
DIVERGE_OF_SCALE = 0.1
# ...and by at least this much: a cross-entropy up by a hundredth of a nat predicts within 1 % of what it
# did, whatever the scale (a fine-tune first seen at 1e-3, with no class count to say what a guess is).
DIVERGE_MIN = 0.01
DIVERGE_STEADY = 0.2  # of the climb: the middle third's median at least this far from either end's
# Jumped and held: the latest REPEATS losses each this many times the first (half of BLOWN_UP's tenfold), within
# HELD_SPREAD of each other (one level, not a per-batch loss's scatter), every loss since the first above it.
HELD_ABOVE = 5.0
HELD_SPREAD = 2.0
# Running away: the latest RUNAWAY_LOGS losses of one sign, each RUNAWAY_STEP times as far from zero as the one before
# (one jump after a level is a spike's shape), the latest BLOWN_UP squared (a hundred) times the first of them, that
# first held away from zero.
RUNAWAY_LOGS = 3
RUNAWAY_FOLD = BLOWN_UP * BLOWN_UP
RUNAWAY_STEP = 2.0
# Lost what it learned: after falling below LEARNED of its first loss, the latest REPEATS logs each LOST times every loss
# before them (its first among them), REPEATS logs at least before them.
LEARNED = 0.5
LOST = 2.0
# Jumped by orders of magnitude at one log: BLOWN_UP to the fourth (ten thousand) times every loss before it, REPEATS logs
# at least before it. The healthy curves' highest single log over every loss before is 26.5 times (a DQN's TD loss).
JUMPED = BLOWN_UP**4


def lr_raised(curve: LossCurve, since: int, base: float | None) -> bool:
    """Whether the steps since ``since`` said a learning rate a quarter above ``base`` (a warm restart,
    a schedule's rise); False where the steps say none, so an old trainer's curve reads as before."""
    return base is not None and any(lr > base * (1 + LR_RAISED) for s, lr in curve.lrs if s >= since)


def diverging(curve: LossCurve, window: list[tuple[int, float]], start: float, highest: float) -> Verdict | None:
    """A loss that climbs steadily through the window, by much, to above where it was first seen
    (``start``) and above every level it has come back from (``highest``: a run first seen mid-way
    whose per-batch loss climbs through one epoch's window to 0.039 has shown 0.045 epochs before:
    issue 54, fresh batch 5):
    the run is coming apart (too high a learning rate, a bad batch it never recovered from), not
    wandering. Block medians carry the trend, so one spike cannot make one; a GAN's, a policy
    gradient's or a warm-up's rise stays below the run's start, does not climb the whole window, or
    is small beside the peaks the run has shown (a GAN generator's 35 at its start); a fine-tune near
    zero rises by less than a tenth of its scale."""
    if curve.signed or max(start, highest) <= 0:
        return None
    per = max(1, len(window) // DIVERGE_BLOCKS)
    ys = [middle(sorted([v for _, v in window[i : i + per]])) for i in range(0, len(window) - per + 1, per)]
    z = mann_kendall_z(ys)
    if z < DIVERGE_Z:
        return None
    # The level it climbed by: the window's later half against its earlier half, so a climb that
    # stays counts and a swing that ends the window on two high batches does not.
    half = len(window) // 2
    before = statistics.median(v for _, v in window[:half])
    after = statistics.median(v for _, v in window[half:])
    rise = after - before
    # Steadily: the middle third of the window sits within the climb, not with either end of it. A
    # step (a curriculum's next stage, a new data mix, a bad shard), held or learnt again, puts it
    # with one end.
    if not _steady(window):
        return None
    # A climb while the schedule raises the learning rate (a warm restart) is judged once it stops
    # raising it: a loss that keeps climbing at a steady rate diverges, a restart's falls again.
    early = [lr for s, lr in curve.lrs if window[0][0] <= s < window[half][0]]
    if early and lr_raised(curve, window[half][0], statistics.median(early)):
        return None
    scale = max(curve.peak, math.log(curve.classes) if curve.classes else 0.0)
    if rise < max(DIVERGE_RISE * abs(before), DIVERGE_OF_SCALE * scale, DIVERGE_MIN):
        return None
    # Still climbing at the window's end: a loss lower at each of the latest REPEATS logs than at the one before is
    # a spike the run is coming back from, judged again as it goes (issue 54, fresh batch 30: a wav2vec2 fine-tune's
    # 883 up to 2,397, then 2,167, 1,679, 1,565, 1,475 and on down to 1,061). Four falls in a row are one chance in
    # 120 for a level's noise, so a divergence is told at a later judgement; a collapse holds its level (the same
    # project's first run at 8,166-8,629 for its last 9 logs), and a single low latest batch is noise, not a way back.
    tail = [v for _, v in window[-REPEATS:]]
    if all(b < a for a, b in pairwise(tail)):
        return None
    # Above where it was first seen by more than that first loss's own uncertainty: it is one batch's,
    # off its level by the series' step-to-step noise, and a flat noisy curve that dips and comes back
    # ends its window about there (a GPT-2 fine-tune's per-batch loss, 1.2-3.2 around 2.2, back to 2.59
    # against its first 2.37: issue 54, fresh batch 10). A quarter above it is past it whatever the
    # noise, by the climb's own measure. A window median it came back from is a level, known to within
    # a half-window median's own noise (jitter / sqrt(half), three times): a short window of single batches
    # whose losses scatter over orders of magnitude puts its later half's median a little past the highest
    # level it came back from, and back under it a few logs later (a DQN's TD loss, 0.001-1.0 log to log,
    # 0.35 against 0.31 over 20 logs; a DiffWave resumed at its floor, 0.019-0.117 a batch: fresh batch 16).
    jitter = robust_sigma([b - a for a, b in pairwise(v for _, v in window)])[1] / math.sqrt(2)
    level = highest + REGRESS_NOISE * jitter / math.sqrt(half)
    if after <= max(start + min(REGRESS_NOISE * jitter, DIVERGE_RISE * start), level):
        return None
    saved = [c for c in curve.checkpoints if c < window[0][0]]
    return Verdict(
        f"loss climbed from {before:.4g} to {after:.4g} over steps {window[0][0]}-{window[-1][0]} "
        f"(Mann-Kendall z {z:.1f}), above {max(start, highest):.4g}, its first loss and every level it came back from: diverging"
        + (f"; checkpoint at step {saved[-1]} predates it" if saved else ""),
        rollback=bool(saved),
    )


def _gap(window: list[tuple[int, float]]) -> int | None:
    """Where the window's later excerpt begins (its index): after a jump of the steps wider than all its other steps
    together, the counter between two excerpts of a run unseen (issue 54, fresh batch 38: a Keras CNN's epochs 39-49,
    then 174-184). None where the steps run on."""
    gaps = [b[0] - a[0] for a, b in pairwise(window)]
    widest = max(gaps, default=0)
    return gaps.index(widest) + 1 if widest > window[-1][0] - window[0][0] - widest else None


def climb_from(window: list[tuple[int, float]]) -> int:
    """The step a climb through ``window`` is judged from, for what the run is evaluated on meanwhile: the later
    excerpt's first step where the window joins two (what the earlier excerpt's evaluations reached is the level the
    climb is measured against, not a sign of learning during it), else the window's first."""
    at = _gap(window)
    return window[at if at is not None else 0][0]


def _steady(window: list[tuple[int, float]]) -> bool:
    """Whether the window climbs steadily: its middle third's median sits within the climb, not with either end
    of it. A step (a curriculum's next stage, a new data mix, a bad shard), held or learnt again, puts it with one
    end. Or, where the window joins two excerpts of a run (:func:`_gap`), the later excerpt goes on climbing by the
    same trend by itself: its thirds by log count put the jump between the excerpts in the middle (a Keras CNN's
    epochs 39-49 at 0.76-0.78, then 1.08 rising to 1.17 at 8 of epochs 174-184: issue 54, fresh batch 38), where a
    new level held or learnt again is flat or falls."""
    third = len(window) // 3
    low, mid, high = (
        statistics.median(v for _, v in part)
        for part in (window[:third], window[third : len(window) - third], window[len(window) - third :])
    )
    if low + DIVERGE_STEADY * (high - low) <= mid <= high - DIVERGE_STEADY * (high - low):
        return True
    at = _gap(window)
    later = [v for _, v in window[at:]] if at is not None else []
    return len(later) >= RUNAWAY_LOGS and mann_kendall_z(later) >= DIVERGE_Z


def running_away(curve: LossCurve) -> Verdict | None:
    """The latest :data:`RUNAWAY_LOGS` losses of one sign, each :data:`RUNAWAY_STEP` times as far from zero as the one
    before, the latest :data:`RUNAWAY_FOLD` times the first of them and every loss before them nearer zero: the loss
    runs away from zero by orders of magnitude, whichever its sign. A loss that may go below zero (a negative SI-SNR, a likelihood)
    is no floor for a divergence: worse is higher, but a value ever farther from any level the objective can reach
    (a CTC recogniser's loss, which should stay above zero, at -2.6e10, -1.4e12, -1.2e13 in its only 3 steps: issue 54,
    fresh batch 38) is arithmetic come apart, where :func:`blown_up` wants 5 logs of a loss above zero. One jump after a
    level (fresh batch 28's chat LoRA at 1.26-1.32, then 34,023.79) is a spike's shape until it holds. A first of
    them near zero (a fine-tune's 1e-7, then a batch's 0.1) has no level a fold measures. The caller asks only while
    no evaluated metric is better than at its first evaluation (a critic's loss grows with the returns it predicts)."""
    held = curve.losses
    if len(held) < RUNAWAY_LOGS:
        return None
    latest = [v for _, v in islice(held, len(held) - RUNAWAY_LOGS, None)]
    sizes = [abs(v) for v in latest]
    if not (all(v > 0 for v in latest) or all(v < 0 for v in latest)) or sizes[0] <= 1e-3:
        return None
    if not all(b >= RUNAWAY_STEP * a for a, b in pairwise(sizes)) or sizes[-1] < RUNAWAY_FOLD * sizes[0]:
        return None
    if any(abs(v) >= sizes[0] for _, v in islice(held, len(held) - RUNAWAY_LOGS)):
        return None
    return Verdict(f"loss {latest[0]:.4g} to {latest[-1]:.4g} over the latest {RUNAWAY_LOGS} logs (steps "
                   f"{held[-RUNAWAY_LOGS][0]}-{held[-1][0]}), twice as far from zero or more at each, "
                   f"{sizes[-1] / sizes[0]:.3g}x in size: running away", rollback=False)


def blown_up(curve: LossCurve) -> Verdict | None:
    """The latest :data:`REPEATS` losses each :data:`BLOWN_UP` times every loss the run showed before them (its first
    among them: worse than where it was first seen, tenfold), those held away from zero: blown up, and not come back
    in 5 logs, as a spike does within a few. No window needs to fill, which a short excerpt never does (issue 54: fresh
    batch 29's Faster R-CNN, 0.0630, 0.1628, 0.0577, then 5.4e19 and up at every step to 2.5e22; fresh batch 5's Keras
    MLP, 1.18 to 0.74 over 10 epochs, then 13.36 and 26.64-26.65 at every epoch after). A loss first seen near zero
    (a fine-tune's 1e-7 at its first logs, then a batch's 0.13-0.69: fresh batch 14) has no level a tenfold rise
    measures; a signed loss (a surrogate) has no floor. The caller asks only when the latest loss is ten times the
    first."""
    held = curve.losses
    if curve.signed or len(held) <= REPEATS:
        return None
    lowest = min(v for _, v in islice(held, len(held) - REPEATS, None))
    before = [v for _, v in islice(held, len(held) - REPEATS)]
    top = max(*before, curve.first or 0.0)  # the first loss too, where a long run's held losses no longer reach it
    if min(before) <= 1e-3 or lowest < BLOWN_UP * top:
        return None
    first, last = held[-REPEATS], held[-1]
    return Verdict(f"loss {lowest:.4g} or more at each of the latest {REPEATS} logs (steps {first[0]}-{last[0]}), "
                   f"{lowest / top:.3g}x every loss before them (at most {top:.4g}): blown up, not come back",
                   rollback=False)


def lost_what_it_learned(curve: LossCurve) -> Verdict | None:
    """After the loss fell below :data:`LEARNED` of its first, the latest :data:`REPEATS` losses each :data:`LOST` times
    every loss the run showed before them, its first among them, with :data:`REPEATS` logs at least before them: the
    run learned, then lost all of it and more, held. The first loss is the model the run was watched from; a run that
    halved it learned, and a loss twice the highest it ever showed, at 5 logs in a row, is worse than that start on
    every batch since, where a spike comes back within a few logs and a per-batch loss's scatter is already in the
    highest before (issue 54, fresh batch 11's GPT-2 in fp32: 10.93 to 4.82 over iterations 0-100, then 270.4, 182.7,
    121.9, 96.7, 68.6 at 110-150, coming down from its blow-up, so never :func:`blown_up`'s tenfold at 5 logs nor
    :func:`held_above_first`'s one level). A first loss near zero (a fine-tune's 1e-7) has no level a fold measures,
    and a signed loss no floor. The caller asks only while no evaluated metric is better than at its first evaluation
    (an RL critic's loss grows with the return it learns to predict)."""
    held, first = curve.losses, curve.first
    # What it learned down to: the lowest loss seen, where a long run's held losses no longer reach it (asked first:
    # a run that never halved its loss is out before its held losses are read, at every step it sits high).
    if curve.signed or first is None or first <= 1e-3 or len(held) < 2 * REPEATS or curve.lowest >= LEARNED * first:
        return None
    before = [v for _, v in islice(held, len(held) - REPEATS)]
    top = max(*before, first)  # the first loss too, where a long run's held losses no longer reach it
    lowest = min(v for _, v in islice(held, len(held) - REPEATS, None))
    if lowest < LOST * top:
        return None
    return Verdict(f"loss {lowest:.4g} or more at each of the latest {REPEATS} logs (steps {held[-REPEATS][0]}-"
                   f"{held[-1][0]}), {lowest / top:.3g}x every loss before them (at most {top:.4g}), after it had "
                   f"fallen to {curve.lowest:.4g} from its first {first:.4g}: lost what it learned", rollback=False)


def lost_what_it_learned_held_out(curve: LossCurve, held_losses: dict, step: int) -> Verdict | None:
    """At an evaluation at ``step``: a held-out loss that fell below :data:`LEARNED` of its first evaluation back at or
    above that first, beside the latest :data:`REPEATS` training losses each :data:`LOST` times the lowest the run
    reached: what it learned is lost on data it never trained on, and on its own batches, held. The first evaluation,
    not the first training log, is the level the run is measured against where a trainer's first log averages an
    untrained head's losses (issue 54, fresh batch 30's wav2vec2 CTC fine-tune: 25,446 at step 50, a 50-step mean, then
    8,202-8,622 through epoch 1, down to 2,114; eval_loss 2,691 at its first evaluation, 680 by its fifth; then the
    training loss climbs to 8,166-8,629 and the held-out loss is 2,797 at step 1,750). An over-fitting model's training
    loss falls while its held-out loss climbs, and a spike on the training batches alone leaves the held-out loss
    where the weights had it. Each level held away from zero, and no signed loss (no floor). The caller asks only while
    no evaluated metric is better at its latest evaluation than at its first. Nor while the weights come back
    (:func:`_coming_back`): the latest :data:`REPEATS` training losses each below the one before, and the held-out loss
    at each of its latest :data:`REPEATS` evaluations too (loss round 49)."""
    held = curve.losses
    if curve.signed or len(held) < REPEATS or curve.lowest <= 1e-3:
        return None
    latest = [v for _, v in islice(held, len(held) - REPEATS, None)]
    lowest = min(latest)
    if lowest < LOST * curve.lowest:
        return None
    for name, kept in held_losses.items():
        evaluated = [v for at, v, _ in kept if at is not None]
        if kept[-1][0] != step or len(evaluated) < 3 or evaluated[0] <= 1e-3:
            continue
        if _coming_back(latest, evaluated):
            continue
        first, best, now = evaluated[0], min(evaluated), evaluated[-1]
        if best < LEARNED * first and now >= first:
            return Verdict(f"held-out {name} {now:.4g} at step {step}, back above its first evaluation {first:.4g} after "
                           f"{best:.4g}, and training loss {lowest:.4g} or more at each of the latest {REPEATS} logs, "
                           f"{lowest / curve.lowest:.3g}x the lowest it reached ({curve.lowest:.4g}): lost what it "
                           f"learned", rollback=False)
    return None


def _coming_back(latest: list[float], evaluated: list[float]) -> bool:
    """Whether a blown-up run is coming back: its latest :data:`REPEATS` training losses (``latest``) each below the one
    before, and its held-out loss at each of its latest :data:`REPEATS` evaluations (``evaluated``) below the one before.
    A held-out evaluation scores fixed data with the weights as they are, so one better at each of five says the weights
    mend, where a run that lost what it learned holds its level on both (issue 54, fresh batch 30's wav2vec2 CTC, its
    training loss back at 8,166-8,629). Fresh batch 48's PaiNN regression, down from a blow-up at epoch 1 to 0.019 at
    epoch 30, blows up again at epoch 31 (9.7e11) and comes back: training 1.17e7, 7.28e6, 3.69e6, 1.57e6 and held-out
    5.58e6, 3.72e6, 1.97e6, 8.84e5, 3.28e5 at epochs 31-35; 0.002 by epoch 170."""
    if len(latest) < REPEATS or len(evaluated) < REPEATS:
        return False
    return all(b < a for a, b in pairwise(latest[-REPEATS:])) and all(b < a for a, b in pairwise(evaluated[-REPEATS:]))


def held_above_first(curve: LossCurve) -> Verdict | None:
    """The latest :data:`REPEATS` losses each :data:`HELD_ABOVE` times the first loss the run showed, within
    :data:`HELD_SPREAD` of each other, and every loss since that first above it: the run left where it was first seen
    for a level it holds, and never came back to it. The first loss is the model the run was watched from (a random
    one at a guess's loss, or a restored checkpoint's trained level); a model that learns, warms up or is resumed with
    what it had goes on from there, and a per-batch loss that scatters about its level dips back to it or spreads
    wider than it rose. A resumed run that broke (issue 54, fresh batch 33: a YOLOv4 restored at 10.57, then 98-136 at
    each of its next 9 logs) or a network coming apart from its first step (its MAR re-identification model, 10.8 at
    iteration 0, then 19.5, 45.3 and 70-86 at the 5 after) holds such a level before any window fills, where
    :func:`blown_up` asks for ten times every loss before. Healthy runs of the fixtures reach at most 2.6 times their
    first with the rest of it (fresh batch 15's per-batch sentence classifier first seen halfway); a first loss near
    zero (a fine-tune's 2e-3, seen halfway, then 0.01-0.14: fresh batch 17) has no level a fold measures, and a signed
    loss no floor. The caller asks only while no evaluated metric is better than at its first evaluation (an RL
    critic's loss climbs a hundredfold while the return it predicts does: fresh batch 15's DDPG)."""
    held, first = curve.losses, curve.first
    if curve.signed or first is None or first <= 1e-3 or len(held) <= REPEATS or curve.low_since_first <= first:
        return None
    latest = [v for _, v in islice(held, len(held) - REPEATS, None)]
    low, high = min(latest), max(latest)
    if low < HELD_ABOVE * first or high > HELD_SPREAD * low:
        return None
    return Verdict(f"loss {low:.4g}-{high:.4g} at each of the latest {REPEATS} logs (steps {held[-REPEATS][0]}-"
                   f"{held[-1][0]}), {low / first:.3g}x its first loss {first:.4g} (step {curve.first_step}) and "
                   f"above it at every log since: left where it was first seen for a level it holds", rollback=False)


def blown_up_held_out(curve: LossCurve, held_losses: dict, step: int) -> Verdict | None:
    """A held-out loss evaluated at ``step`` :data:`BLOWN_UP` times every evaluation of it before, beside a training
    loss at that step as many times every loss the run showed before it: the weights themselves came apart. One batch's
    loss can spike and come back (a bad batch, a loss scaler's overflow), but a held-out evaluation scores fixed data
    with the weights as they are, so a tenfold jump in both at once is no batch's: the model that training holds is
    broken. No window needs to fill, nor :func:`blown_up`'s 5 logs (issue 54, fresh batch 35's LadderNet: train loss
    0.348 to 0.160 over epochs 0-3, then 1.6e18 at its 5th and last log, its validation loss 3.05 to 1.9e7 there).
    Each level held away from zero (a fine-tune near 1e-7 has none a fold measures) and no signed loss (no floor)."""
    held = curve.losses
    if curve.signed or len(held) < 2 or held[-1][0] != step:
        return None
    before = [v for _, v in islice(held, len(held) - 1)]
    latest = held[-1][1]
    top = max(*before, curve.first or 0.0)
    if min(before) <= 1e-3 or latest < BLOWN_UP * top:
        return None
    for name, kept in held_losses.items():
        evaluated = [(at, v) for at, v, _ in kept if at is not None]
        if len(evaluated) < 2 or evaluated[-1][0] != step:
            continue
        then = [v for _, v in evaluated[:-1]]
        now = evaluated[-1][1]
        if min(then) > 1e-3 and now >= BLOWN_UP * max(then):
            return Verdict(f"loss {latest:.4g} at step {step}, {latest / top:.3g}x every loss before it (at most "
                           f"{top:.4g}), and held-out {name} {now:.4g} there, {now / max(then):.3g}x every evaluation "
                           f"before (at most {max(then):.4g}): the weights came apart, not one batch", rollback=False)
    return None


def blown_up_from_level(curve: LossCurve) -> Verdict | None:
    """The latest :data:`REPEATS` losses each :data:`BLOWN_UP` times the median of every loss before them, with
    :data:`REPEATS` logs at least before them: blown up from the level the run held, not come back. :func:`blown_up`
    measures against the highest loss before, so a blow-up that climbs in steps (its first log only 7.5 times the level,
    the next 5 times it) never passes it at 5 logs in a row; the median is the level the run held, which a spike or the
    blow-up's own first steps do not move (issue 54, fresh batch 43's character CNN: 0.23-0.48, then 3.61, 8.54, 5.26,
    322, 21.9, 131, 4977 without a nan, found at the 5th log after it). Healthy curves reach at most 2.4 times their
    earlier median at 5 logs in a row (fresh batch 12's per-step gesture GRU), and RL critics 7.5 (fresh batch 15's
    DDPG, its return rising). A level near zero (a fine-tune's 1e-7) has none a fold measures, and a signed loss no
    floor. The caller asks only while no evaluated metric is better than at its first evaluation."""
    held = curve.losses
    if curve.signed or len(held) < 2 * REPEATS:
        return None
    before = [v for _, v in islice(held, len(held) - REPEATS)]
    level = statistics.median(before)
    lowest = min(v for _, v in islice(held, len(held) - REPEATS, None))
    if min(before) <= 1e-3 or lowest < BLOWN_UP * level:
        return None
    return Verdict(f"loss {lowest:.4g} or more at each of the latest {REPEATS} logs (steps {held[-REPEATS][0]}-"
                   f"{held[-1][0]}), {lowest / level:.3g}x the {level:.4g} the run held before them (their median): "
                   f"blown up from its level, not come back", rollback=False)


def jumped(curve: LossCurve) -> Verdict | None:
    """The latest loss :data:`JUMPED` times every loss before it, :data:`REPEATS` logs at least before it: a jump of
    four orders of magnitude in one step is no batch's noise but the weights come apart (issue 54, fresh batch 43's PFNL
    video super-resolution model, 0.0087-0.0168 for 10 logs, then 1,508,190 at step 30,220, finite; its trainer prints
    'Model collapsed'). Healthy curves reach at most 26.5 times every loss before at one log (fresh batch 17's CartPole
    DQN, its TD loss spiking while the return is at its maximum). Each loss before held away from zero (a fine-tune near
    1e-7 has no level a fold measures), and no signed loss. The caller asks only while no evaluated metric is better
    than at its first evaluation."""
    held = curve.losses
    if curve.signed or len(held) <= REPEATS:
        return None
    before = [v for _, v in islice(held, len(held) - 1)]
    latest = held[-1][1]
    if min(before) <= 1e-3 or latest < JUMPED * max(before):
        return None
    return Verdict(f"loss {latest:.4g} at step {held[-1][0]}, {latest / max(before):.3g}x every loss before it (at most "
                   f"{max(before):.4g}): jumped by orders of magnitude, the weights come apart", rollback=False)
