"""A held-out accuracy that never changed from the first evaluation: a model answering alike for every input.

A classifier that predicts one class whatever the input scores that class's share of the held-out set at every
evaluation, to the last digit, and its losses sit at the entropy of the class shares, a level no event carries
(issue 54's fresh batch 21: a VGG19 from random weights on castles, tree houses and lighthouses, val_accuracy
0.7294, 248 of 340 images, the castles, at all 10 epochs; its training loss 0.660-0.675 after its first epoch, the
training split's shares' entropy 0.655, a third below ln 3). Against 1/3 the share left chance, and neither loss is
a guess's (loss_eval.py); what says the model learned nothing is that no held-out answer moved while its weights
did. A learner from random weights changes its answers most over its first evaluations.

So: a share of the held-out set (higher is better, its chance a fraction between 0 and 1: an accuracy with its
class count) the same to every digit at each of the first five evaluations (loss_eval.EVALS: what a held-out
reading waits for) is a finding, judged only

* from the run's first evaluation, watched from an untrained model (the stalled-loss detector's reading of its
  start): a model that learned repeats its share too once converged on a small held-out set (fresh batch 13's
  gesture ConvLSTM from scratch: 0.1875, 0.1875, 0.3125, ..., then 0.8125, 13 of 16, at 20 evaluations in a row),
  and a run first seen mid-way, a fine-tune, starts converged;
* below 1: a model right on every held-out example has nothing left to change;
* while a held-out loss beside it has moved since the first evaluation: the model's outputs changed, so each
  evaluation was a new one, and its answers did not (the VGG19's val_loss 0.664-0.701). A trainer that logs one
  evaluation again repeats every metric, and a share with no loss beside it says nothing of its outputs.

It waits (loss_eval.observe, loss round 48) while, over the latest five evaluations, a held-out loss falls at each by
1 % of its level in all beside a training loss falling at each too (loss_eval_falls.both_falling): the model still learns
what reaches held-out data, and its answers may yet move (fresh batch 47's LeNet with a 200-way head on CIFAR-10:
val_acc 0.1000 at epochs 1-5 while val_loss fell 2.379 to 2.308 and its training loss 3.156 to 2.310; 0.1322 at
epoch 6, 0.386 by epoch 50). The finding comes once either stops falling with the share still unchanged.

A share that rises to the commonest class's and stays there (fresh batch 17's 3-way stock head, 0.477, 0.603,
0.686, 0.720, then 0.7264 at 21 evaluations) moved first: not this reading. Pure: the same live and replayed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from faultlens.events.envelope import as_float
from faultlens.events.payloads_job import TrainEval


@dataclass(slots=True)
class FirstShares:
    """Each held-out share as first evaluated: (its value, how many evaluations from the first repeated it, the
    steps of the first and latest); a share that changed is None from then on."""

    kept: dict[str, tuple[float, int, int | None, int | None] | None] = field(default_factory=dict)
    losses: dict[str, float] = field(default_factory=dict)  # each held-out loss as first evaluated
    loss_moved: bool = False  # one of them has since changed
    told: bool = False  # the finding was raised: one per job

    def add(self, payload: TrainEval) -> None:
        for name, raw in (payload.metrics or {}).items():
            value, higher = as_float(raw), TrainEval.direction(name, payload.higher_is_better)
            if value is None or not math.isfinite(value):
                continue
            if higher is False:
                self.loss_moved = self.loss_moved or value != self.losses.setdefault(name, value)
                continue
            chance = (payload.chance or {}).get(name)
            if higher is not True or chance is None or not 0 < chance < 1:
                continue
            if name not in self.kept:
                self.kept[name] = (value, 1, payload.step, payload.step)
                continue
            was = self.kept[name]
            self.kept[name] = (value, was[1] + 1, was[2], payload.step) if was is not None and value == was[0] else None

    def unchanged(self, rank: int, evals: int) -> str | None:
        """The finding's detail once a share below 1 repeated at ``evals`` evaluations from the first (raised
        once); None otherwise."""
        if self.told or not self.loss_moved:
            return None
        held = [(name, kept) for name, kept in self.kept.items() if kept is not None and kept[1] >= evals and kept[0] < 1]
        if not held:
            return None
        self.told = True
        parts = ", ".join(f"{name} {value:.4g}" for name, (value, _, _, _) in held)
        _, (_, count, first, last) = held[0]
        where = f" (steps {first}-{last})" if first is not None and last is not None else ""
        return (
            f"held-out {parts} the same to every digit at each of its first {count} evaluations{where}, watched "
            f"from an untrained model: no held-out answer changed, as a model answering one class for every input scores "
            f"that class's share (rank {rank})"
        )
