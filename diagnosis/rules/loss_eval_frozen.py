"""A held-out loss that never changed from the first evaluation while the training loss moved: outputs that do not
depend on the weights or the input.

A model whose every output is one point scores one loss on every held-out set, whatever its weights do: a triplet
network whose embedding collapsed (all distances 0) scores its margin exactly (issue 54, fresh batch 37's two Keras
FaceNets: val_loss 0.2000 at all 7 and all 8 epochs from scratch while the training loss jumped 270, 3.5, 2520, 24.9
in one and crept 0.1902 to 0.1775 in the other; their reporters, 'I get same embedding for all anchor, positive and
negative', 'val_loss frozen'). The training loss moves because its batches differ and the weights are stepped; the
held-out loss does not because the model's answers never depended on them. A learner from random weights changes its
held-out loss most over its first evaluations, so an unchanged one there is the clearest reading (the held-out
accuracy's is loss_eval_unchanged.py).

So: a held-out loss above 0 the same to every digit at each of its first :data:`loss_eval.EVALS` evaluations, judged
only from an untrained model's start (the caller's reading: a fine-tune starts converged, and a converged model on a
small held-out set may repeat itself), while the training losses logged between its first and latest evaluation
differ by :data:`MOVED` of their level at least: the weights moved; and only where the evaluation reports losses alone
(a metric-learning run evaluates its loss and nothing else). Beside a held-out accuracy the accuracy says it: one that
moved says the outputs did, and one repeated with the loss to every digit is one evaluation logged again, which says
nothing of the model (loss_eval_unchanged.py, issue 54's round 24). A held-out loss of 0 is a fitted one. Pure.
"""

from __future__ import annotations

import statistics
from collections import deque

from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict

MOVED = 0.01  # the training loss's spread, as a share of its median, that says the weights were stepped


def held_out_frozen(curve: LossCurve, held: dict[str, deque], metrics: dict, evals: int) -> Verdict | None:
    """The verdict once some held-out loss in ``held`` (loss_eval.HeldOutWatch.held_losses: each (step, value, False)
    since its first evaluation) repeated its first value at ``evals`` evaluations or more, the evaluation's ``metrics``
    all losses; None otherwise."""
    if not metrics or any("loss" not in name.lower() for name in metrics):
        return None
    for name, kept in held.items():
        values = [value for _, value, _ in kept]
        if len(values) < evals or kept.maxlen == len(values) or values[0] <= 0 or any(v != values[0] for v in values):
            continue
        first, last = kept[0][0], kept[-1][0]
        if first is None or last is None:
            continue
        trained = [loss for step, loss in curve.losses if first <= step <= last]
        if len(trained) < 2 or max(trained) - min(trained) <= MOVED * abs(statistics.median(trained)):
            continue
        return Verdict(f"held-out {name} {values[0]:.6g} the same to every digit at each of its first {len(values)} "
                       f"evaluations (steps {first}-{last}) from an untrained model while its training loss moved "
                       f"{min(trained):.4g}-{max(trained):.4g}: outputs that depend on neither weights nor input (a "
                       f"collapsed embedding scores its margin)", rollback=False)
    return None
