"""The Monte-Carlo engine: run the job's timeline fault by fault, many times.

Same model as closed_form.py but nothing taken in expectation: faults arrive one by one
(exponential gaps, class drawn by rate), each spends its detection, localisation and recovery time,
an eviction takes spares from a pool that gets each back ``spare_return_days`` later (a dry pool
means a requeue), the job stops at its end date. ETTR per run is productive / wall; the runs give a
mean and a 95 % confidence interval of that mean. ByteRobust also reports ETTR over 1-hour windows:
each run keeps its productive seconds per hour, and the runs' hours give the window ETTR's spread
(a run segment's productive time is spread evenly over it: windows are approximate within a
checkpoint period, which is far shorter than an hour).
"""

from __future__ import annotations

import bisect
import math
import random
from collections import deque
from dataclasses import dataclass
from statistics import fmean, stdev

from faultlens.history.whatif.closed_form import optimal_interval, spares_for
from faultlens.history.whatif.model import DAY_S, PHASES, FaultClass, Scenario

Z95 = 1.959964


@dataclass(frozen=True)
class MonteCarlo:
    ettr: float
    ci: tuple[float, float]                  # 95 % interval of the mean over runs
    runs: int
    breakdown: dict[str, dict[str, float]]   # mean share of wall time, cause -> phase
    faults_mean: float
    requeues_mean: float                     # evictions that found the pool short, per run
    window_ettr: dict[str, float]            # 1-hour windows over all runs: mean, p1, p5, p50, share below 90 %


class _Pool:
    """Spares held by evictions until they come back (FIFO: every loan lasts the same time)."""

    def __init__(self, spares: int, return_s: float) -> None:
        self.spares, self.return_s = spares, return_s
        self.loans: deque[tuple[float, int, int]] = deque()   # (back at, machines, of them over-evicted)
        self.out = self.over_out = 0

    def _settle(self, now: float) -> None:
        while self.loans and self.loans[0][0] <= now:
            _, n, over = self.loans.popleft()
            self.out -= n
            self.over_out -= over

    def take(self, now: float, need: int, over: int) -> tuple[bool, bool]:
        """(granted, a shortage the over-evicted machines caused): short means a requeue, and the
        requeue brings its own machines, so the pool lends nothing then."""
        self._settle(now)
        free = self.spares - self.out
        if free >= need:
            self.loans.append((now + self.return_s, need, over))
            self.out += need
            self.over_out += over
            return True, False
        return False, free + self.over_out >= 1


WINDOW_S = 3600.0


def _spread(hours: list[float], t0: float, t1: float, productive: float) -> None:
    """Add ``productive`` seconds, spread evenly over [t0, t1), to the hours they fall in."""
    if t1 <= t0 or productive <= 0:
        return
    rate = productive / (t1 - t0)
    h = int(t0 // WINDOW_S)
    while t0 < t1 and h < len(hours):
        edge = min(t1, (h + 1) * WINDOW_S)
        hours[h] += rate * (edge - t0)
        t0, h = edge, h + 1


def _run_once(s: Scenario, tau: float, spares: int, rng: random.Random) -> tuple[float, dict, int, int, list]:
    lam = s.fault_rate_s()
    end = s.duration_s
    stall = s.checkpoint_stall_s
    period = tau + stall
    r = s.recovery
    classes: list[FaultClass] = list(s.faults)
    cum = []
    acc = 0.0
    for f in classes:
        acc += f.rate
        cum.append(acc)
    pool = _Pool(spares, s.spare_return_days * DAY_S)
    lost = {f.name: dict.fromkeys(PHASES, 0.0) for f in classes}
    lost["checkpoint"] = {"stall": 0.0}
    productive = 0.0
    hours = [0.0] * math.ceil(end / WINDOW_S)
    t = 0.0
    faults = requeues = 0
    while t < end:
        x = rng.expovariate(lam) if lam > 0 else math.inf
        done = x >= end - t
        x = min(x, end - t)
        k = math.floor(x / period)
        u = x - k * period
        lost["checkpoint"]["stall"] += k * stall + max(0.0, u - tau)
        if done:
            # The job's last stretch needs no checkpoint to count.
            productive += k * tau + min(u, tau)
            _spread(hours, t, t + x, k * tau + min(u, tau))
            break
        faults += 1
        f = classes[min(bisect.bisect_right(cum, rng.random() * acc), len(classes) - 1)]
        if f.loses_work:
            lost[f.name]["lost_work"] += min(u, tau)
            kept = k * tau
        else:
            kept = k * tau + min(u, tau)
        productive += kept
        _spread(hours, t, t + x, kept)
        t += x
        spans = [("detection", f.detect_s, f.slowdown), ("localisation", f.localise_s, f.slowdown)]
        if f.planned:
            spans.append(("recovery", r.hot_update_s, 1.0))
        elif rng.random() < f.evict_share:
            over = math.floor(f.over_evict) + (rng.random() < f.over_evict - math.floor(f.over_evict))
            granted, over_caused = pool.take(t + f.detect_s + f.localise_s, 1 + over, over)
            if granted:
                spans.append(("recovery", r.standby_s, 1.0))
            else:
                requeues += 1
                spans.append(("recovery", r.standby_s, 1.0))
                spans.append(("over_eviction" if over_caused else "recovery",
                              max(0.0, r.requeue_s - r.standby_s), 1.0))
        else:
            spans.append(("recovery", r.restart_s, 1.0))
        for phase, seconds, slow in spans:
            seconds = min(seconds, end - t)
            lost[f.name][phase] += slow * seconds
            productive += (1 - slow) * seconds
            _spread(hours, t, t + seconds, (1 - slow) * seconds)
            t += seconds
    full_hours = [v / WINDOW_S for v in hours[: int(end // WINDOW_S)]]
    return (productive / end, {c: {p: v / end for p, v in ph.items()} for c, ph in lost.items()}, faults, requeues,
            full_hours)


def _window_summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    values.sort()

    def q(p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))]
    return {"mean": fmean(values), "p1": q(0.01), "p5": q(0.05), "p50": q(0.5),
            "below_90": sum(1 for v in values if v < 0.9) / len(values)}


def simulate(s: Scenario, runs: int = 200, seed: int = 0, interval_s: float | None = None) -> MonteCarlo:
    """``runs`` independent timelines of ``s`` (seeded: the same seed gives the same answer)."""
    s.validate()
    if runs < 2:
        raise ValueError(f"runs must be >= 2 for an interval, got {runs}")
    tau = interval_s or s.checkpoint_interval_s or optimal_interval(s)
    spares = spares_for(s)
    rng = random.Random(seed)
    ettrs, faults, requeues, windows = [], [], [], []
    total: dict[str, dict[str, float]] = {}
    for _ in range(runs):
        e, lost, n, q, hours = _run_once(s, tau, spares, rng)
        windows.extend(hours)
        ettrs.append(e)
        faults.append(n)
        requeues.append(q)
        for cause, phases in lost.items():
            into = total.setdefault(cause, dict.fromkeys(phases, 0.0))
            for p, v in phases.items():
                into[p] += v / runs
    mean = fmean(ettrs)
    half = Z95 * stdev(ettrs) / math.sqrt(runs)
    return MonteCarlo(mean, (mean - half, mean + half), runs, total, fmean(faults), fmean(requeues),
                      _window_summary(windows))
