"""Frozen forms of a short log that printed_frozen (loss_cycle.py) leaves: a loss at zero to float rounding, a loss
repeated at many logs though its float keeps too few digits, and a classifier's loss exactly 0 at every log.

printed_frozen reads the latest :data:`loss_cycle.REPEATS` losses one value to every digit printed, those digits fine
enough that a loss still moving would change them, away from zero and not once the schedule has decayed. Three shapes
it cannot read (issue 54, loss round 42, fresh batch 39):

- :func:`float_zero`: a loss of magnitude at most :data:`FLOAT_ZERO` at :data:`REPEATS` logs to every one of at
  least :data:`DIGITS` printed significant digits. No data scores that little: it is a sum of terms that are each 0,
  left with float rounding (a DetectNet whose total loss prints -6.43825e-20 beside loss_bbox = 0 and loss_coverage
  = 0 at every display from iteration 560 to 9640). It says nothing is scored whatever the schedule: a decayed rate
  holds a converged loss still, never at 1e-20.
- :func:`long_repeat`: a loss away from zero the same at :data:`LONG_REPEATS` logs in a row (three times
  :data:`REPEATS`) that its float reads too coarsely for printed_frozen: a trainer's "4.600" reaches the detector as
  4.6, whose last digit is a fiftieth of it (a Lightning bar's train_loss=4.600 at 15 printed batches). A moving loss
  printed to two significant digits changes them within fifteen logs unless it is converged with its schedule
  decayed (left out, as printed_frozen does), and a loss at 0.001-0.05 printed to one digit may (held to
  :data:`LONG_LEVEL` and above).
- :func:`zero_with_classes`: a classifier's loss (the steps say a class count of 2 or more) exactly 0 at every log
  from the first the run showed, :data:`loss_cycle.STEPPING_REPEATS` logs at least, and no held-out loss above 0.
  A softmax over classes scores 0 only where the true class gets probability 1 on every sample; a fine-tune's
  first display already there has no labels to score (a C3D fine-tune on UCF101's 101 classes at loss 0 at
  iterations 20, 40 and 60: its list file had no labels). A surrogate that sits at 0 while it learns (a GRPO's
  group-normalised advantages) has no class count.
Pure.
"""

from __future__ import annotations

from itertools import islice

from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict
from faultlens.diagnosis.rules.loss_cycle import REPEATS, STEPPING_REPEATS, printed_unit

FLOAT_ZERO = 1e-12  # a loss's magnitude no data scores: zero left with float rounding
DIGITS = 1e-3  # the last printed digit at most this share of the value: four significant digits or more
LONG_REPEATS = 3 * REPEATS
LONG_LEVEL = 0.1  # a loss held at a level at least this, printed ...
TWO_DIGITS = 0.1  # ... with its last digit at most this share of it (two significant digits)


def _alike(curve: LossCurve, count: int) -> list[tuple[int, float]]:
    """The latest run of losses one value, oldest first, at most ``count`` long."""
    held = list(islice(reversed(curve.losses), count))
    alike = next((n for n, (_, v) in enumerate(held) if v != held[0][1]), len(held)) if held else 0
    return held[:alike][::-1]


def float_zero(curve: LossCurve) -> Verdict | None:
    """The latest :data:`REPEATS` losses one value of magnitude at most :data:`FLOAT_ZERO`, not 0, printed to
    :data:`DIGITS` of it or finer (module docstring); None otherwise."""
    latest = _alike(curve, REPEATS)
    if len(latest) < REPEATS:
        return None
    level = latest[0][1]
    if level == 0.0 or abs(level) > FLOAT_ZERO or printed_unit(level) > DIGITS * abs(level):
        return None
    return Verdict(f"loss {level:.6g} at every digit printed for {REPEATS} logs (steps {latest[0][0]}-"
                   f"{latest[-1][0]}): zero to float rounding, nothing is scored", rollback=False)


def long_repeat(curve: LossCurve) -> Verdict | None:
    """The latest :data:`LONG_REPEATS` losses one value of at least :data:`LONG_LEVEL`, printed to two significant
    digits or more, the schedule not decayed (module docstring); None otherwise."""
    latest = _alike(curve, LONG_REPEATS)
    if len(latest) < LONG_REPEATS or curve.schedule_decayed():
        return None
    level = latest[0][1]
    if level < LONG_LEVEL or printed_unit(level) > TWO_DIGITS * level:
        return None
    return Verdict(f"loss {level:.6g} at every digit printed for {LONG_REPEATS} logs (steps {latest[0][0]}-"
                   f"{latest[-1][0]}): the weights no longer change", rollback=False)


def zero_with_classes(curve: LossCurve, held_out: dict) -> Verdict | None:
    """Every loss exactly 0 from the run's first log, :data:`STEPPING_REPEATS` logs at least, of a classifier over 2
    classes or more, no held-out loss above 0 (``held_out``: loss_eval.HeldOutWatch.held_losses); None otherwise."""
    if curve.classes is None or curve.classes < 2 or curve.signed or curve.peak != 0.0 or curve.seen < STEPPING_REPEATS:
        return None
    if any(value != 0.0 for kept in held_out.values() for _, value, _ in kept):
        return None
    return Verdict(f"loss 0 at every log from the first ({curve.seen} logs, steps {curve.first_step}-"
                   f"{curve.losses[-1][0]}) of a {curve.classes}-way classifier: no label is scored", rollback=False)
