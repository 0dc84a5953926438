"""When a non-finite held-out loss is the run's fault and when it is the evaluation's own arithmetic (issue 54).

A held-out loss that was finite and became NaN or infinite says the model broke: its outputs overflowed on data
it did not train on, or its weights went NaN (fresh27's alpaca-lora runs). One that is non-finite from its FIRST
evaluation, while the same evaluation's other metrics are numbers that move from one evaluation to the next, is
how that evaluation computes its loss (a CTC loss's inf on an utterance shorter than its transcript, averaged in),
not the run: fresh44's Marathi ASR LoRA logs val_loss nan at all three evaluations beside a word error rate of
0.208, 0.221, 0.211 and a falling training loss. Where nothing else held out moves (no other metric, or one
frozen at the same value, as fresh44's text-GCN runs' held-out accuracy 0.32117 at every epoch) the evaluation
is as broken as its loss, and it alerts. A non-finite TRAINING loss is the step rule's own nan_loss, whatever
the held-out loss did (diagnosis/rules/training.py), so it needs no word here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from faultlens.events.envelope import as_float

Key = tuple[str, int | None]


class HeldOutNan:
    """Per job and rank: which held-out losses have been finite, and the other held-out metrics at the evaluation
    before, to say whether a non-finite held-out loss alerts (:meth:`alerts`)."""

    def __init__(self) -> None:
        self._finite: set[tuple[str, int | None, str]] = set()  # (job, rank, metric) once a finite value came
        self._before: dict[Key, dict[str, float]] = {}  # the last evaluation's finite metrics other than losses

    def alerts(self, job: str, rank: int | None, metrics: Mapping[str, object]) -> str | None:
        """The name of the non-finite held-out loss that alerts at this evaluation, or None; records the evaluation."""
        values = {name: as_float(raw) for name, raw in metrics.items()}
        others = {n: v for n, v in values.items() if "loss" not in n.lower() and v is not None and math.isfinite(v)}
        before = self._before.get((job, rank))
        self._before[(job, rank)] = others
        found = None
        for name, value in values.items():
            if value is None or "loss" not in name.lower():
                continue
            if math.isfinite(value):
                self._finite.add((job, rank, name))
            elif found is None and ((job, rank, name) in self._finite or not self._evaluation_works(others, before)):
                found = name
        return found

    @staticmethod
    def _evaluation_works(others: dict[str, float], before: dict[str, float] | None) -> bool:
        """Whether the evaluation's other metrics say it computes: at the first evaluation, that it has one (the
        next says whether it moves); after, that one of them moved since the evaluation before."""
        if not others:
            return False
        if before is None:
            return True
        return any(name in before and before[name] != value for name, value in others.items())
