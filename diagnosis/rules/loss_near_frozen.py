"""A loss from random weights that moves in no more than its sixth digit: frozen, though no two logs print alike.

printed_frozen (loss_cycle.py) reads a short log whose losses are one value to every digit printed. A trainer that
prints a mean over an epoch to a millionth shows a frozen model's loss moving in its last digit or two, from float
rounding and whichever samples fell in the last partial batch, and never repeats a line exactly (issue 54, fresh
batch 37's activity-recognition CNN run unchanged from its script: 10.845988, 10.845994, 10.845989, 10.84598,
10.845976, 10.845982, 10.845993, 10.845982 at epochs 0-7, training accuracy 0.054814555 at each; its reporter, 'the
loss had almost the same value during all epochs'). A model learning from random weights moves its loss by far more
than a hundred-thousandth of it in five epochs; one whose weights do not move cannot.

So, before the first window fills (a whole window's spread is the window's own frozen test): the latest
:data:`loss_cycle.REPEATS` losses within :data:`loss_cycle.CYCLE_DIGITS` of their level ("to 5 digits", as a
cycle's batches are), the finest of them printed to a tenth of that or finer (a loss printed to four digits cannot
show a move of 1e-5), the level above 1e-3; judged only when the caller has the curve watched from an untrained
model (a converged fine-tune at the end of its schedule may sit so), not at a uniform guess's loss where the class
count is said (from random weights that is the window's "at chance", which waits to see whether it leaves: fresh
batch 4's AdaGrad at 2.3026 for 19 logs, then learning), nor once the schedule has decayed. Pure.
"""

from __future__ import annotations

import math
import statistics
from itertools import islice

from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict
from faultlens.diagnosis.rules.loss_cycle import CYCLE_DIGITS, REPEATS, printed_unit
from faultlens.diagnosis.rules.loss_eval import CHANCE

SHOWN = 0.1  # the finest printed digit, as a share of the tolerance, that lets a move within it show


def near_frozen(curve: LossCurve) -> Verdict | None:
    """The latest :data:`REPEATS` losses of a curve watched from random weights within :data:`CYCLE_DIGITS` of their
    level, printed finely enough to show a move (module docstring); None otherwise."""
    latest = list(islice(reversed(curve.losses), REPEATS))[::-1]
    if len(latest) < REPEATS or curve.schedule_decayed():
        return None
    values = [value for _, value in latest]
    level = abs(statistics.median(values))
    if level <= 1e-3 or max(values) - min(values) > CYCLE_DIGITS * level:
        return None
    if min(printed_unit(value) for value in values) > SHOWN * CYCLE_DIGITS * level:
        return None
    if curve.classes is not None and abs(level - math.log(curve.classes)) <= CHANCE * math.log(curve.classes):
        return None
    return Verdict(f"loss {min(values):.8g}-{max(values):.8g} for {REPEATS} logs (steps {latest[0][0]}-{latest[-1][0]}), "
                   f"within {CYCLE_DIGITS:g} of its level from random weights: the weights no longer change",
                   rollback=False)
