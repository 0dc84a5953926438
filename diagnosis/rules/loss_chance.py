"""A loss at chance: the stalled-loss detector's first form (diagnosis/rules/loss_stalled.py, docs/design.md §3).

A model that predicts no better than a uniform guess scores ln(classes) on every batch, and one that learned
only which labels are common scores their distribution's entropy (the ``chance_loss`` the trainer states).
Either level, held for a whole window, is a run that learned nothing of its input, whatever its shape.
"""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict
from faultlens.diagnosis.rules.loss_eval import CHANCE


def at_chance(curve: LossCurve, level: float, over: str, *, came_down: bool, steady: bool,
              climbing: bool = False) -> Verdict | None:
    """The window's level at (or above) a guess's loss, ln(classes), or the class prior's the trainer
    states."""
    # A guess's loss is what the training loss says of what the model predicts; the held-out metric,
    # where the trainer evaluates, says it directly. One that left chance at its latest evaluation is a
    # model that predicts better than a guess, whatever its training loss adds to the data's (a Bayesian
    # network's KL term: fresh batch 11's, at ln 2 in training, 0.70 accurate held out from its first
    # epoch, its sibling at 0.51 and ln 2 in both). Nor is a training loss at a guess's a stall while the
    # held-out loss beside it may be leaving chance (loss_eval.HeldOutWatch.leaving): a plateau at chance that
    # ends shows there first (fresh batch 17's MNIST CNN, val_loss 2.3038, 2.3007, 2.2974 ... 2.1626 over nine
    # epochs at ln 10, then 0.33; its twin at chance for all twenty wanders at 2.3016-2.3060).
    waiting = curve.held_out_learned or curve.held_out_leaving
    if curve.classes is not None and not waiting:
        chance = math.log(curve.classes)
        if level >= chance * (1 - CHANCE):
            where = "at" if level <= chance * (1 + CHANCE) else "above"
            # A guess's loss is ln(classes) on every batch, whatever its labels: a per-batch loss whose
            # spread is over a tenth of its level (STEADY, as "never learned" asks) is a model answering
            # confidently, right on some batches and wrong on others, whose median only passes by
            # chance. Above a guess, such a loss is stuck there only if it has not come down from a
            # level it was judged at (a blow-up: POET at lr 0.3, 14.7 against ln 16); one that came down
            # is falling towards a guess, as "never learned" is not said of a loss that came down. A
            # fine-tune's new head is both: one batch's loss, 0.4-4.8 around ln 5 (fresh batch 11); the
            # runs found at chance spread by 0-6.5 % of their level (fresh batches 1-11). One climbing steadily
            # through the window (its block medians' Mann-Kendall trend, as "diverging" asks) is not falling
            # towards a guess, whatever it came down from: fresh batch 22's 52B GPT, blown up to 48 at its 4th
            # step, down to 11.65, then up at every step to 20.4 against ln 50257 = 10.82.
            if steady or (where == "above" and (not came_down or climbing)):
                return Verdict(
                    f"loss {level:.4g} over {over} is {where} chance, ln({curve.classes}) = "
                    f"{chance:.4g}: the model predicts no better than a uniform guess",
                    rollback=False,
                )
    # At the class prior the trainer states: the labels' distribution learned, nothing of the input. Under
    # an MSE the same level is the labels' variance, what answering their mean scores (fresh batch 15: a
    # network regressing a 0/1 label with 3.4 % positives at p(1 - p) = 0.0331, from its first epoch or
    # after blowing up to 132,746).
    prior = curve.chance_loss
    if prior is not None and level >= prior * (1 - CHANCE) and not waiting:
        where = "at" if level <= prior * (1 + CHANCE) else "above"
        return Verdict(
            f"loss {level:.4g} over {over} is {where} {prior:.4g}, the loss of answering without the input "
            f"(the labels' distribution, or their mean): the model has learned nothing of its input",
            rollback=False,
        )
    return None


# A loss under half a guess's, ln(classes), is a model that learned its input (the SVHN child CNN below at 0.73-1.06
# against ln 10 = 2.30); one within a tenth of a guess's at half the shortest window's logs in a row (10: each a
# guess's, not one batch's swing) is back at a guess.
LEARNED_SHARE = 0.5
GUESS_BAND = 0.1
COLLAPSED_LOGS = 10


def note_guess(curve: LossCurve, loss: float) -> None:
    """Count the losses in a row within :data:`GUESS_BAND` of ln(classes), this one the latest."""
    near = curve.classes is not None and abs(loss - math.log(curve.classes)) <= GUESS_BAND * math.log(curve.classes)
    curve.at_guess = curve.at_guess + 1 if near else 0


def collapsed(curve: LossCurve, step: int) -> Verdict | None:
    """A run that learned far below a guess's loss and is back at it (issue 54, fresh batch 25: an SVHN child CNN of an
    architecture search, 0.73-1.06 at steps 4000-4700, then 2.14-2.28 at all 10 logs from 4800, its minibatch accuracy
    a guess's). A model that predicts a guess's on every batch has forgotten what it learned, and its loss stays there:
    no window needs to fill (the issue quotes 18 logs). A spike comes back within a few logs, and a plateau at chance
    a run has not yet left is never below half of it. Not while a held-out metric says the model learned (as at_chance)."""
    if curve.classes is None or curve.at_guess < COLLAPSED_LOGS or curve.held_out_learned or curve.held_out_leaving:
        return None
    guess = math.log(curve.classes)
    if curve.lowest > LEARNED_SHARE * guess:
        return None
    latest = [v for _, v in list(curve.losses)[-COLLAPSED_LOGS:]]
    return Verdict(
        f"loss {min(latest):.4g}-{max(latest):.4g} at the latest {COLLAPSED_LOGS} logs to step {step}, within a tenth "
        f"of a guess's ln({curve.classes}) = {guess:.4g}, after {curve.lowest:.4g}: the model learned, then collapsed "
        "to a uniform guess",
        rollback=False,
    )
