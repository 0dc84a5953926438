"""The judgement of a loss curve's latest whole window (diagnosis/rules/loss_stalled.py): learning, by a
Theil-Sen slope over its block medians or by leaving a plateau, or else which stall it is (at chance, frozen,
never learned, diverging, regressed, learned a little then stopped), the detector's list in order."""

from __future__ import annotations

import statistics

from faultlens.diagnosis.rules.loss_chance import at_chance
from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict, block_medians, middle
from faultlens.diagnosis.rules.loss_cycle import window_frozen
from faultlens.diagnosis.rules.loss_diverging import DIVERGE_Z, REGRESS_NOISE, climb_from, diverging, lr_raised
from faultlens.diagnosis.rules.loss_eval import HeldOutWatch
from faultlens.diagnosis.rules.loss_plateau import stopped_early
from faultlens.diagnosis.rules.loss_start import from_start, trained_start, untrained_head
from faultlens.diagnosis.rules.loss_trend import mann_kendall_z, theil_sen
from faultlens.diagnosis.rules.training import robust_sigma

BLOCKS = 10
LEARNING_DROP = 0.01  # of the level, across one window: still learning
LEARNED = 0.05  # below the start level by this fraction: the run has learned something
REGRESSED = 0.25  # of what the run had learned, above its best: it lost that much of it
# "Never learned" is a loss that stays by its start: a model that learned nothing answers alike at every
# step, so no tenth of the window sits 5 % below its first loss, and its spread is under a tenth of its
# level (0.05-6 % in the runs found: issue 54's fresh batches 6-7). A loss that swings by more, or dips
# and comes back, is a contest or a schedule, not a stall: a GAN generator's from random weights trades
# blows at 0.25-9.8 around its first 4.8 (17 %: fresh batch 1), DINO's falls to 7.4 from ln 65536 and
# climbs back to it as its teacher sharpens (fresh batch 4).
STEADY = 0.1


def judge_window(curve: LossCurve, size: int, held_out: HeldOutWatch, job: str) -> Verdict | None:
    """The verdict on the curve's latest whole window of ``size`` steps, judged every tenth of a window: None while
    it learns (or before a whole window), else at chance, frozen, never learned, diverging, regressed, or learned a
    little then stopped, the first of them that holds (loss_stalled.py's list)."""
    if curve.seen < size or len(curve.losses) < size:
        return None  # not a whole window yet: the warm-up is never judged
    curve.next_check = curve.seen + max(1, size // 10)
    window = list(curve.losses)[-size:]
    values = [v for _, v in window]
    xs, ys = block_medians(window, BLOCKS)
    level = middle(sorted(values))
    lowest = min(ys)
    highest, curve.highest = curve.highest, max(curve.highest, level)
    # The best is a whole window's median: the lowest of many short blocks is their noise's low tail.
    if level < curve.best:
        curve.best, curve.best_from, curve.best_step = level, window[0][0], window[-1][0]
        during = [lr for s, lr in curve.lrs if s >= window[0][0]]
        curve.best_lr = statistics.median(during) if during else None
    span = (xs[-1] - xs[0]) or 1.0
    drop = -theil_sen(xs, ys) * span
    _, noise = robust_sigma(values)
    # Leaving a plateau: the window's latest block below every earlier one by more than the
    # window's noise. The trend over the whole window is still the plateau's when a run at chance
    # starts to learn at its end (a fine-tune at ln 61 for 17 epochs of its warm-up, then 4.08,
    # 4.07, 4.05: issue 54, fresh batch 4); judged again a tenth of a window later.
    leaving = ys[-1] < min(ys[:-1]) - REGRESS_NOISE * noise
    learning = drop >= LEARNING_DROP * abs(level) or leaving
    if learning:
        curve.fired = False  # learning again: a later stall is a new finding
        return None
    first, last = window[0][0], window[-1][0]
    over = f"steps {first}-{last}"
    start = curve.first if curve.first is not None else level
    came_down = level < highest - LEARNED * abs(highest)
    steady = noise <= STEADY * abs(level)
    chance = at_chance(curve, level, over, came_down=came_down, steady=steady,
                       climbing=mann_kendall_z(ys) >= DIVERGE_Z)
    if chance is not None:
        return chance
    frozen = window_frozen(curve, values, level, over)
    if frozen is not None:
        return frozen
    # Never learned: not below its start, nor below any level the run has come down from (a
    # federated model on non-IID clients is pulled to 6.7 after its first rounds at ln 10 and is
    # back at 2.19 twenty rounds on, learning: issue 54, fresh batch 6).
    near = start * (1 - LEARNED) if start > 0 else start
    # ...unless its held-out metric left chance or may be leaving it (loss_eval.py, loss_chance.py).
    if (untrained_head(curve, size) and not came_down and steady and lowest >= near
            and not curve.held_out_learned and not curve.held_out_leaving):
        return Verdict(f"loss {level:.4g} over {over} has not fallen below its start {start:.4g} "
                       f"(trend {-drop:+.3g} across the window)", rollback=False)
    # A climb while what the run is evaluated on gets better (since the climb's excerpt began, where the window joins
    # two: loss_diverging.climb_from) is the loss's scale growing with it (an RL
    # critic's, whose targets are its own returns: loss_eval.HeldOutWatch.improving), not a divergence.
    climb = None if held_out.improving(job, climb_from(window)) else diverging(curve, window, start, highest)
    if climb is not None:
        return climb
    regressed = _regressed(curve, held_out, job, window, start, lowest, noise)
    if regressed is not None:
        return regressed
    # Learned a little, then stopped: a level no event carries (a class prior, a data variance), told
    # by the curve's own shape from its start (diagnosis/rules/loss_plateau.py).
    # ...and whose held-out loss stopped too: one still falling is a model learning near a floor of its own
    # (a softmax fed to cross-entropy: fresh batch 14's MLP at 2.44 over 28 classes, val_loss falling 30 epochs).
    # ...and measured from an untrained model's loss: a fine-tune's first is its pretrained model's, and a
    # short fall from it then a slow one is the new data's format learned first (fresh batch 15's LLaMA-13B
    # fine-tune, 1.8 then about 1.5 a step, a nat below per epoch), no class prior.
    if (curve.first is not None and curve.first_step is not None and from_start(curve, size)
            and not curve.held_out_falling and not trained_start(curve)):
        why = stopped_early(list(curve.losses), curve.first, curve.first_step, level, noise, size,
                            curve.stride(), curve.schedule_decayed())
        if why is not None:
            return Verdict(f"{why} (steps {first}-{last})", rollback=False)
    return None


def _regressed(curve: LossCurve, held_out: HeldOutWatch, job: str, window: list[tuple[int, float]], start: float,
               lowest: float, noise: float) -> Verdict | None:
    """Regressed: every block of the window (its lowest block median ``lowest``) above the best level the run
    reached by a quarter of what it had learned and of that level's size, once what it learned stands out
    of the window's step-to-step ``noise``."""
    first = window[0][0]
    # What a run learned before it was first seen is unknown: a run first seen mid-way, resumed or
    # fine-tuned has learned more than its first loss shows, and a quarter of what it learned since
    # can be a plateau's wander (a long run first seen at 4.5 sits 5 % above its best 4.0, issue
    # 54's fresh batch 1). A regression also rises a quarter above the level it had reached.
    # A quarter of the level is of its size: a likelihood loss below zero (-94) is no smaller a level.
    # A rise the schedule made is no regression: a warm restart lifts the learning rate from its
    # low, where the run reached its best, back to its peak, and the loss sits higher with it for
    # epochs (LocalRetro's cosine restarts every 10 epochs double a 0.010 loss: issue 54, fresh
    # batch 5). Judged only where the steps say their learning rate; without it, as before. (A
    # warm-up past a good rate whose loss rises with it is no regression either while the rate
    # stays raised: it shows as diverging, at chance or never learned.) Nor is a loss above its best while
    # what the run is evaluated on is better than when the loss was there: the run has lost nothing (a PPO
    # loss's value term grows with the returns it predicts: fresh batch 16's, 0.21 then 0.5-0.7 as its
    # return goes -8 to 10-45), nor one back to its held-out loss (loss_eval.HeldOutWatch.lost_nothing).
    learned = start - curve.best
    if (learned > REGRESS_NOISE * noise and lowest >= curve.best + REGRESSED * max(learned, abs(curve.best))
            and not lr_raised(curve, first, curve.best_lr)
            and not held_out.lost_nothing(job, curve.best_step or first, first, lowest)):
        # A checkpoint saved about when the loss was at its best holds what the run has since lost.
        near = len(window) // BLOCKS
        good = [c for c in curve.checkpoints if curve.best_step is not None and curve.best_from is not None
                and curve.best_from - near <= c <= curve.best_step + near]
        level = statistics.median(v for _, v in window)
        lost = (lowest - curve.best) / learned
        return Verdict(f"loss {level:.4g} over steps {first}-{window[-1][0]} stays above the {curve.best:.4g} the "
                       f"run reached at step {curve.best_step}, losing {lost:.0%} of what it had learned"
                       + (f"; checkpoint at step {good[-1]} predates it" if good else ""), rollback=bool(good))
    return None
