"""A gradient norm at zero: the weights no longer move (fault class ``loss_stalled``, loss_stalled.py).

Apart from the loss: a gradient norm under :data:`GRAD_ZERO`, or a millionth of its early median (the run's own
scale over its first :data:`START_STEPS` steps), for a fifth of a window of steps (5 at least): nothing will
move the weights again. The checkpoint saved before the collapse holds the model as it was while it still
moved, so the verdict is a rollback where there is one.

Once the gradient has come back from zero (a step moved the weights again after zeros), the run's zeros pass: a
GRPO group whose completions all score alike has no advantage to follow, and its steps' gradient is exactly 0
until a group with a spread comes (issue 54's fresh batch 21: a remasking policy for LLaDA-8B, grad norm 0.0 at
164 of 1,000 steps in runs of 2 to 6, its reward rising from 0.125 to 0.31). Such a run needs zeros for a whole
window of steps, the stretch over which a stall of the loss is judged at all: a gradient that died for good is
found a window late, not never. Pure: the state is the curve's (loss_curve.LossCurve).
"""

from __future__ import annotations

import statistics

from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict

START_STEPS = 10  # the early steps whose grad norms are the run's own scale
GRAD_ZERO = 1e-8
GRAD_ZERO_RATIO = 1e-6


def gradient_zero(curve: LossCurve, step: int, grad: float, window: int) -> Verdict | None:
    """Count the step's gradient norm in the curve's run of zeros; the verdict once that run is a fifth of
    ``window`` steps long (5 at least), or the whole ``window`` once the gradient has come back from zero."""
    if len(curve.grad_early) < START_STEPS:
        curve.grad_early.append(grad)
    early = statistics.median(curve.grad_early)
    if grad < GRAD_ZERO or (early > 0 and grad < GRAD_ZERO_RATIO * early):
        if curve.grad_zero_since is None:
            curve.grad_zero_since = step
        curve.grad_zero_run += 1
    else:
        curve.grad_came_back = curve.grad_came_back or curve.grad_zero_run > 0
        curve.grad_zero_since, curve.grad_zero_run = None, 0
        return None
    if curve.grad_zero_run < (window if curve.grad_came_back else max(5, window // 5)):
        return None
    since = curve.grad_zero_since
    good = [c for c in curve.checkpoints if c < since]
    return Verdict(
        f"gradient norm {grad:.3g} (zero) for {curve.grad_zero_run} steps since step {since}: "
        f"the weights no longer move" + (f"; last checkpoint before it at step {good[-1]}" if good else ""),
        rollback=bool(good),
    )
