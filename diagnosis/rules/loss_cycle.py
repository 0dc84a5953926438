"""A loss frozen batch by batch: the stalled-loss detector's cyclic form of "frozen" (docs/design.md §3).

A model whose weights no longer move answers every input as it did before. Fed the same batches in the
same order each epoch (no shuffling, a fixed validation-like split, a full-batch physics loss), its
per-step loss is then a cycle: each batch at its own value, the same to five digits epoch after epoch,
however far apart the batches are. The flat "frozen" test (one value over the window) misses it, and so
does "never learned" when the first step is the highest batch's (issue 54, fresh batch 8: an EEG-to-fMRI
decoder whose 4 batches sit at 2.89e8, 2.88e8, 2.55e8 and 2.11e8 for 68 epochs, every window's median 6 %
below its first step). No step event carries a batch index or an epoch length: the period is found from
the losses themselves, the shortest after which every value repeats.

A learning run never repeats to five digits: its batches' losses fall, or its shuffled batches differ
from epoch to epoch. A run whose schedule has decayed its learning rate to nothing may, and is left to the
flat test's judgement (a converged run at the end of its schedule is no fault).
"""

from __future__ import annotations

import statistics

CYCLE_DIGITS = 1e-5  # each batch's loss within this share of its level across the window: "to 5 digits"
MIN_CYCLES = 3  # the window holds at least this many whole periods: one repeat is a coincidence
# The batches differ by ten times that at least: a loss flat to within a few times the tolerance splits
# into short interleaved series that each fit it by chance (a PINN drifting 1.7e-5 of its level over 20
# epochs fits "every 3 steps": issue 54, fresh batch 7). One flat value is the flat test's (FROZEN).
DISTINCT = 10.0


def frozen_period(values: list[float], tolerance: float = CYCLE_DIGITS) -> int | None:
    """The shortest period ``p`` of at least 2 (at most a third of the window) after which every value of
    ``values`` repeats within ``tolerance`` of its level: each of the ``p`` interleaved series (every
    ``p``-th value, one batch's losses epoch after epoch) spreads by no more, while the batches differ from
    each other by ``DISTINCT`` times as much. None when no period does, or when the values are at or
    around zero (a share of zero says nothing)."""
    n = len(values)
    for p in range(2, n // MIN_CYCLES + 1):
        # The first value's repeat a period on rules out nearly every period at once: a window of 2,000
        # steps is judged every 200, and a learning curve's periods all fail here.
        if abs(values[p] - values[0]) > 2 * tolerance * abs(values[0]):
            continue
        series = [values[k::p] for k in range(p)]
        if not all(_steady(s, tolerance) for s in series):
            continue
        levels = [statistics.median(s) for s in series]
        if max(levels) - min(levels) > DISTINCT * tolerance * abs(statistics.median(levels)):
            return p
    return None


def _steady(series: list[float], tolerance: float) -> bool:
    level = abs(statistics.median(series))
    return level > 0 and max(series) - min(series) <= tolerance * level
