"""A loss at the value a framework prints for a softmax whose true class's probability underflowed: saturated.

A cross-entropy takes -ln of the probability the model gives the true class. Frameworks clip that probability away
from 0 so the log stays finite: Caffe's SoftmaxWithLoss at FLT_MIN (the smallest normal float32, so a sample's loss
is at most -ln FLT_MIN = 87.3365), Keras's cross-entropies at its epsilon 1e-7 (at most -ln 1e-7 = 16.1181). A batch
mean at exactly that ceiling says every sample's probability hit the clip: the logits have blown up and the softmax
puts everything on a wrong class, and from there its gradient is zero or saturated too, so the run does not come
back (issue 54, fresh batch 37's Caffe GoogleNet: 11.2306 at iteration 0, then 87.3365 at 100, 200 and 300; its
reporter, 'it never comes down'). The ceiling is the framework's, not the data's: it holds whatever the class count,
which no such log says.

So: :data:`SATURATED_LOGS` logs in a row at one of :data:`CEILINGS`, each within half a unit of its own last printed
digit and printed to :data:`PRINTED` of the level or finer (87.34 would be any loss near there; 87.3365 is the
ceiling), or to float32's precision where it prints more digits. Whatever the run's start: one first seen at the
clip is as broken as one that came up to it. A loss that merely passes near the ceiling moves on at its next log.
Or :data:`SATURATED_LOGS` - 1 logs at the ceiling straight after a loss under :data:`FITTED` of it: no optimizer step
takes a model that fits its batches to every sample's true class at probability 0, so the logits blew up, and held
there for a second log it is no one batch's (fresh batch 40's Caffe on CUDA 8: 2.0e-4, 1.6e-4, 6.0e-5, then 87.3365
at iterations 20,480 and 20,500; its reporter, 'always jumps to 87.3365').
Pure: the same live and replayed.
"""

from __future__ import annotations

import math
from itertools import islice

from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict
from faultlens.diagnosis.rules.loss_cycle import printed_unit

# -ln of the probability each framework clips a softmax's output at: Caffe's FLT_MIN, Keras's epsilon.
CEILINGS: dict[float, str] = {
    -math.log(1.1754943508222875e-38): "-ln FLT_MIN, Caffe's softmax loss of a probability clipped to the float minimum",
    -math.log(1e-7): "-ln 1e-7, Keras's cross-entropy of a probability clipped to its epsilon",
}
SATURATED_LOGS = 3
# A loss under this share of the ceiling has fitted its data (0.87 for Caffe's, 0.16 for Keras's): one that is at the
# ceiling at its next SATURATED_LOGS - 1 logs went from fitting its batches to every sample wrong in one log's steps.
FITTED = 0.01
PRINTED = 1e-4
FLOAT32 = 1.2e-7  # float32's relative precision: a ceiling computed in float32 and printed in full


def saturated(curve: LossCurve) -> Verdict | None:
    """The latest :data:`SATURATED_LOGS` losses each the ceiling a framework clips a softmax loss at (module
    docstring); None otherwise."""
    held = [value for _, value in islice(reversed(curve.losses), SATURATED_LOGS)]
    if len(held) < SATURATED_LOGS:
        return None
    for ceiling, what in CEILINGS.items():
        at = [_printed_as(value, ceiling) for value in held]
        # Or the latest SATURATED_LOGS - 1 at the ceiling straight after a fitted loss (module docstring).
        jumped = all(at[:-1]) and not at[-1] and held[-1] <= FITTED * ceiling
        if all(at) or jumped:
            logs = SATURATED_LOGS - 1 if jumped else SATURATED_LOGS
            steps = [step for step, _ in islice(reversed(curve.losses), logs)][::-1]
            after = f", straight after {held[-1]:.6g}" if jumped else ""
            return Verdict(f"loss {held[0]:.6g} at {logs} logs (steps {steps[0]}-{steps[-1]}){after} = {what}: "
                           f"every sample's true class at probability 0, the logits blown up", rollback=False)
    return None


def _printed_as(value: float, ceiling: float) -> bool:
    """Whether ``value`` is ``ceiling`` rounded at its own last printed digit (or as float32 holds it), that digit
    at most :data:`PRINTED` of it."""
    unit = printed_unit(value)
    return unit <= PRINTED * ceiling and abs(value - ceiling) <= max(0.5 * unit * (1 + 1e-9), FLOAT32 * ceiling)


# A held-out loss is a mean over the test set's batches summed in float32: at the ceiling it lands within this share of
# it, not to its last printed digit (Caffe's test SoftmaxWithLoss 87.3362 beside the training display's 87.3365).
SUMMED = 1e-5


def saturated_held_out(curve: LossCurve, held_out: dict) -> Verdict | None:
    """The latest :data:`SATURATED_LOGS` - 1 training losses each at a ceiling (as :func:`saturated` reads it) and
    the latest held-out loss evaluated within :data:`SUMMED` of the same one: the model saturates on data it never
    trained on too, so no batch's labels did it (issue 54, fresh batch 39's wide residual network: 87.3365 in
    training and 87.3362 in test at iterations 1170 and 1560). ``held_out``: loss_eval.HeldOutWatch.held_losses."""
    held = list(islice(reversed(curve.losses), SATURATED_LOGS - 1))
    latest = [kept[-1][1] for kept in held_out.values() if kept]
    if len(held) < SATURATED_LOGS - 1 or not latest:
        return None
    for ceiling, what in CEILINGS.items():
        if all(_printed_as(value, ceiling) for _, value in held) and all(
                abs(value - ceiling) <= SUMMED * ceiling for value in latest):
            return Verdict(f"loss {held[0][1]:.6g} at {len(held)} logs (steps {held[-1][0]}-{held[0][0]}) and held-out "
                           f"loss {latest[0]:.6g} = {what}: every sample's true class at probability 0, on held-out "
                           f"data too", rollback=False)
    return None
