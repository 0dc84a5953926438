"""Whether a held-out loss near a guess's is still falling: the two trend readings loss_eval.py's
at-chance finding waits on (its module docstring says why each holds a finding back)."""

from __future__ import annotations

from itertools import pairwise

from faultlens.diagnosis.rules.loss_trend import mann_kendall_z

EVALS = 5  # evaluations in a row at chance: a healthy run's first few may sit there (an epoch's warm-up)
FALLING_Z = 1.96  # a held-out loss falling by a Mann-Kendall trend this far below none: still coming down
# A held-out loss falling by this share of its level an evaluation falls by loss_stalled's LEARNING_DROP (1 %)
# within ten: the training loss's bar for learning across a window of ten blocks.
PACE = 1e-3
# A held-out loss falling by this share of its level over the latest EVALS evaluations, beside a training loss that
# falls at each of them, is still learning (both_falling): loss_stalled's LEARNING_DROP, the training loss's bar for
# learning across a window (loss round 47).
DROP = 0.01


def both_falling(values: list[float], beside: list[float]) -> bool:
    """Whether a held-out loss and the training loss beside it both still fall (module docstring): over the latest
    :data:`EVALS` evaluations of the run at chance, the held-out loss at each below the one before (a Mann-Kendall
    fall at :data:`FALLING_Z`) and by :data:`DROP` of its level in all, and the training loss the trainer logged last
    before each of them a Mann-Kendall fall at :data:`FALLING_Z` too, whichever side of chance either sits."""
    if len(values) < EVALS or len(beside) < EVALS:
        return False
    latest = values[-EVALS:]
    return (mann_kendall_z(latest) <= -FALLING_Z and latest[0] - latest[-1] >= DROP * abs(latest[-1])
            and mann_kendall_z(beside[-EVALS:]) <= -FALLING_Z)


def gathering_pace(values: list[float]) -> bool:
    """Whether a held-out loss may be leaving chance (module docstring): seen once (one evaluation says
    nothing of where it goes); then falling at every evaluation by :data:`PACE` of its level at least; and
    from :data:`EVALS` evaluations on, at each of the latest by more than at the one before: a plateau that
    is ending falls faster each time, where a loss settling onto a level, a class prior's or a guess's, falls
    by less each time, and one crawling at a learning rate far too low by the same (fresh batch 17's crypto
    LSTM, 0.127 an epoch of 681) or by next to nothing (fresh batch 16's building-energy MLP, 1e-5 of its
    level an epoch, if faster each time)."""
    latest = values[-EVALS:]
    steps = [a - b for a, b in pairwise(latest)]
    if not all(d >= PACE * abs(latest[-1]) for d in steps):
        return False
    return len(latest) < EVALS or all(b > a for a, b in pairwise(steps))
