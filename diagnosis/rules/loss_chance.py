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
# A guess's loss to four digits (a ten-thousandth of ln(classes)): the output uniform on every batch, whatever the
# batch holds; a loss printed to 4 decimals at ln 2 or ln 10 (0.6931, 2.3026) is within it, one a batch's answers move
# is not. Above a guess's by more than a tenth at a quarter of the shortest window's logs in a row (5, as
# loss_cycle.REPEATS reads a short log): worse than answering uniformly on every batch, no one batch's spike.
EXACT = 1e-4
ABOVE_LOGS = 5
# Twice a guess's loss at those 5 logs, whatever came before: the answer it needs given the odds of a guess among
# classes**2, on every batch. A random init starts about a guess's; one that starts higher (raw pixels' huge logits,
# 63 x ln 2 at a first epoch) or spikes there comes down within 1-3 logs (the healthy runs of fresh batches 1-27).
FAR_ABOVE = 2.0


def note_guess(curve: LossCurve, loss: float) -> None:
    """Count the losses in a row near ln(classes) (within :data:`GUESS_BAND`, within :data:`EXACT`) and above it by
    more than :data:`GUESS_BAND`, this one the latest."""
    guess = math.log(curve.classes) if curve.classes is not None else None
    near = guess is not None and abs(loss - guess) <= GUESS_BAND * guess
    curve.at_guess = curve.at_guess + 1 if near else 0
    curve.exact_guess = curve.exact_guess + 1 if guess is not None and abs(loss - guess) <= EXACT * guess else 0
    curve.above_guess = curve.above_guess + 1 if guess is not None and loss > (1 + GUESS_BAND) * guess else 0


def far_above(curve: LossCurve, guess: float) -> bool:
    """The latest :data:`ABOVE_LOGS` losses each over twice ``guess`` and not coming down across them (the last no
    lower than the first): an init whose logits start it above a guess's falls from there at once."""
    latest = [v for _, v in list(curve.losses)[-ABOVE_LOGS:]]
    return min(latest) > FAR_ABOVE * guess and latest[-1] >= latest[0]


def collapsed(curve: LossCurve, step: int, trained: bool, early: bool = False) -> Verdict | None:
    """A model that has trained and now answers as a uniform guess does, or worse; no window needs to fill (the runs
    below quote 10-18 logs). ``trained``: the curve was first seen past its first window of steps (the caller's
    loss_start.from_start), a run that has trained however its start went; ``early``: no whole window of logs
    has been judged yet (after one, "above chance" says a loss held over a guess's). Four readings:

    * it learned far below a guess's loss and is back within a tenth of it at 10 logs in a row (issue 54, fresh batch
      25: an SVHN child CNN of an architecture search, 0.73-1.06 at steps 4000-4700, then 2.14-2.28 at all 10 logs
      from 4800, its minibatch accuracy a guess's). A spike comes back within a few logs, and a plateau at chance a run
      has not yet left is never below half of it;
    * it learned far below a guess's loss and is a tenth above it at 5 logs in a row: worse than a guess on every
      batch, what the model knew destroyed (fresh batch 26: a QLoRA on the pretrained StarCoderBase at learning rate
      0.005, 0.9974 at step 10, then 13.5-29.6 against ln 49152 = 10.80 from step 40);
    * before a whole window, it is over twice a guess's loss at 5 logs in a row and not coming down across them,
      whatever it learned: worse than a guess by that much on every batch, a run a window's "above chance" would judge
      too late or, in a log shorter than a window, never (fresh batch 27: an alpaca-lora LLaMA LoRA at 129,369 to 99,355,040 at each of its 20 logs
      against ln 32000 = 10.37, its learning rate 0.0 at 16);
    * first seen after it has trained, it sits at a guess's loss to four digits (:data:`EXACT`) at 10 logs in a row:
      an output uniform whatever the input (fresh batch 26: DINO at epochs 201-211, 11.090327-11.090333 against ln
      65536 = 11.090355). Watched from its start, a model sits there while its random weights answer alike (fresh
      batch 4's AdaGrad CNN, 2.3026 for 19 logs, then learning; a DPO run whose policy is its reference, ln 2), which
      the window's "at chance" and "never learned" judge.

    Not while a held-out metric says the model learned or may be leaving chance (as at_chance)."""
    # At a guess's to four digits is within a tenth of it: these two counts say whether a reading may hold.
    if curve.at_guess < COLLAPSED_LOGS and curve.above_guess < ABOVE_LOGS:
        return None
    if curve.classes is None or curve.held_out_learned or curve.held_out_leaving:
        return None
    guess = math.log(curve.classes)
    learned = curve.lowest <= LEARNED_SHARE * guess
    if learned and curve.at_guess >= COLLAPSED_LOGS:
        how = f"within a tenth of a guess's ln({curve.classes}) = {guess:.4g}, after {curve.lowest:.4g}"
        logs, digits = COLLAPSED_LOGS, 4
        what = "the model learned, then collapsed to a uniform guess"
    elif learned and curve.above_guess >= ABOVE_LOGS:
        how = f"a tenth above a guess's ln({curve.classes}) = {guess:.4g}, after {curve.lowest:.4g}"
        logs, digits = ABOVE_LOGS, 4
        what = "the model learned, then became worse than a uniform guess"
    elif early and curve.above_guess >= ABOVE_LOGS and far_above(curve, guess):
        how = f"over twice a guess's ln({curve.classes}) = {guess:.4g} at each"
        logs, digits = ABOVE_LOGS, 4
        what = "the model answers worse than a uniform guess on every batch"
    elif trained and curve.exact_guess >= COLLAPSED_LOGS:
        how = f"at a guess's ln({curve.classes}) = {guess:.6g} to four digits, first seen trained"
        logs, digits = COLLAPSED_LOGS, 6
        what = "the model answers as a uniform guess whatever its input"
    else:
        return None
    latest = [v for _, v in list(curve.losses)[-logs:]]
    low, high = f"{min(latest):.{digits}g}", f"{max(latest):.{digits}g}"
    return Verdict(f"loss {low}-{high} at the latest {logs} logs to step {step}, {how}: {what}", rollback=False)
