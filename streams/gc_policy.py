"""Garbage-collector settings for a long-running consumer.

A consumer allocates a few dozen containers per message (a decoded GPU sample is ~250 objects), so
CPython's default first-generation threshold (700 allocations) runs a collection every few
messages, and each full collection walks everything imported at start (scikit-learn, pandas):
measured on the node stage, a third of its CPU went to the collector. Objects alive once the
consumer is built live for the whole run, so they are frozen out of the collector's sight, and the
young generation is collected every 50,000 allocations instead of 700, the middle one every
20th time instead of every 10th. Reference counting still
frees everything acyclic at once; only cyclic garbage waits a little longer.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

YOUNG_THRESHOLD = 50_000
MIDDLE_THRESHOLD = 20
_tuned = False


def tune_for_streaming() -> None:
    """Once per process: collect, freeze what is alive, collect the young generation less often."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, gc.get_threshold()[2])
    log.debug("gc: %d objects frozen, young threshold %d", gc.get_freeze_count(), YOUNG_THRESHOLD)
