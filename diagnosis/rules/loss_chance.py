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
