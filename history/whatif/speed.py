"""The job's speed on the running clock while slow machines are being found, and the work a restart
keeps or loses.

A degraded class f (a fail-slow machine) arrives as a Poisson stream of mu_f per running second and
is found D_f = detect_s + localise_s running seconds later, when it is evicted: a restart. The
searches in flight are an M/G/inf queue, and a synchronous job runs at 1 - the largest slowdown in
flight. Its mean (``mean_speed``) is the speed at a random running second, and it is independent of
the time since the last restart (that depends on arrivals more than D_f ago, the speed on the last
D_f), so the work done is the mean speed times the compute time.

The work a restart finds since the last checkpoint is another matter. Looking back y seconds from
a restart with none since, no slow machine of f that arrived more than D_f before that point can
still be in flight (its eviction would have been a restart since), so f is in flight there with
the probability of an arrival in the last D_f - y seconds, not D_f: the stretch before a restart
ran faster than the mean. And the stretch before a slow machine's own eviction ran, all of its last
D_f seconds, at that machine's speed or slower. Weighing that work by the mean speed (what the
closed form did before issue 59) keeps too much at a fail-slow eviction and loses too little at a
stopping fault; ``unsaved_work`` integrates the speed over the stretch instead, exactly: on each
piece between the D_f, the stall and the period, the speed and the stretch's density are sums of
exponentials of y.
"""

from __future__ import annotations

import math
from itertools import pairwise

from faultlens.history.whatif.model import FaultClass, Scenario

# (slowdown, arrivals per running second, running seconds until found) of one degraded class
Slow = tuple[float, float, float]


def slow_classes(s: Scenario, lam: float) -> dict[str, Slow]:
    """The degraded classes that slow the job, by name."""
    total = sum(f.rate for f in s.faults)
    if lam == 0 or total == 0:
        return {}
    return {f.name: (f.slowdown, lam * f.rate / total, f.detect_s + f.localise_s)
            for f in s.faults if f.degrades and f.slowdown > 0}


def _thresholds(slow: dict[str, Slow]) -> list[tuple[float, float]]:
    """(level, gap) from the largest slowdown down: the speed is 1 - sum of gap x P(a machine at least
    this slow is in flight), gap the step to the next lower level (the last one to 0)."""
    levels = sorted({x[0] for x in slow.values()}, reverse=True)
    return [(level, level - (levels[i + 1] if i + 1 < len(levels) else 0.0)) for i, level in enumerate(levels)]


def mean_speed(s: Scenario, lam: float) -> float:
    """The job's mean throughput over its running time, as a share of full speed: the number of class
    f in flight is Poisson with mean mu_f x D_f, independent across classes."""
    slow = slow_classes(s, lam)
    return 1.0 - sum(gap * -math.expm1(-sum(mu * d for sd, mu, d in slow.values() if sd >= level))
                     for level, gap in _thresholds(slow))


def _exp_integral(p: float, r: float, y0: float, y1: float) -> float:
    """The integral of exp(p + r y) over [y0, y1], written so that neither end overflows."""
    width = y1 - y0
    if r == 0:
        return math.exp(p) * width
    if r > 0:
        return math.exp(p + r * y1) * -math.expm1(-r * width) / r
    return math.exp(p + r * y0) * -math.expm1(r * width) / -r


def unsaved_work(s: Scenario, lam: float, tau: float, stall: float, partial_compute: float,
                 at: FaultClass | None = None) -> float:
    """E[work done since the last completed checkpoint] when a restart strikes: a Poisson fault
    (``at`` None or not degraded) or the eviction of a slow machine of ``at``.

    Restarts are Poisson at ``lam`` on the running clock (the evictions of an M/G/inf queue are), so
    the time back to the last checkpoint is u = X mod P, X ~ Exp(lam), P = tau + stall, and compute
    y seconds back is unsaved with density k(y) = P(y <= u < y + tau) (``partial_compute`` is its
    integral, the speed-blind answer). Each threshold's P(in flight at y) is 1 - exp(-A(y)), A the
    sum of mu_f x (D_f - y) over the classes at least that slow whose window still covers y, and
    certain for ``at`` itself over its last D."""
    slow = slow_classes(s, lam)
    if not slow:
        return partial_compute
    period = tau + stall
    one_q = -math.expm1(-lam * period)
    forced = slow.get(at.name) if at is not None and at.degrades else None
    cuts = {0.0, period, *(d for _, _, d in slow.values() if 0 < d < period)}
    if 0 < stall < period:
        cuts.add(stall)
    edges = sorted(cuts)
    # k(y) = e^{-lam y} (1 - e^{-lam tau}) / one_q while y < stall (the stretch ends in a stall),
    # (e^{-lam y} - e^{-lam P}) / one_q after.
    head = -math.expm1(-lam * tau) / one_q
    lost = 0.0
    for level, gap in _thresholds(slow):
        kept = 0.0      # integral of k(y) x P(nothing this slow in flight at y)
        for y0, y1 in pairwise(edges):
            mid = (y0 + y1) / 2
            if forced is not None and forced[0] >= level and mid < forced[2]:
                continue
            window = [(mu, d) for sd, mu, d in slow.values() if sd >= level and d > mid]
            a, b = sum(mu * d for mu, d in window), sum(mu for mu, _ in window)
            if mid < stall:
                kept += head * _exp_integral(-a, b - lam, y0, y1)
            else:
                kept += (_exp_integral(-a, b - lam, y0, y1) - _exp_integral(-a - lam * period, b, y0, y1)) / one_q
        lost += gap * max(0.0, partial_compute - kept)
    return partial_compute - lost
