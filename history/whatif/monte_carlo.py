"""The Monte-Carlo engine: run the job's timeline fault by fault, many times.

Same model as closed_form.py but nothing taken in expectation: faults arrive one by one on the
running clock (exponential gaps, class drawn by rate), a stopping one spends its detection,
localisation and recovery as downtime, a degraded one (a slow machine) leaves the job running at
reduced speed, still exposed to faults, until it is found and then recovered,
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
from collections.abc import Callable
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
    """Add ``productive`` seconds (negative: work lost), spread evenly over [t0, t1), to their hours."""
    if t1 <= t0 or productive == 0:
        return
    rate = productive / (t1 - t0)
    h = int(t0 // WINDOW_S)
    while t0 < t1 and h < len(hours):
        edge = min(t1, (h + 1) * WINDOW_S)
        hours[h] += rate * (edge - t0)
        t0, h = edge, h + 1


class _Clock:
    """The trainer's checkpoint clock on running time: compute ``tau`` s, stall ``stall`` s, repeat;
    work done since the last completed checkpoint (or restart) is what a fault loses."""

    def __init__(self, tau: float, stall: float) -> None:
        self.tau, self.period = tau, tau + stall
        self.since = 0.0        # running seconds since the last restart
        self.unsaved = 0.0      # work (speed-weighted compute seconds) since the last checkpoint

    def compute(self, a: float, b: float) -> float:
        def c(x: float) -> float:
            return math.floor(x / self.period) * self.tau + min(x % self.period, self.tau)
        return c(b) - c(a)

    def run(self, seconds: float, speed: float) -> tuple[float, float]:
        """Run ``seconds`` at ``speed``: (compute seconds, stall seconds)."""
        a, b = self.since, self.since + seconds
        compute = self.compute(a, b)
        if math.floor(b / self.period) > math.floor(a / self.period):
            self.unsaved = speed * min(b % self.period, self.tau)
        else:
            self.unsaved += speed * compute
        self.since = b
        return compute, seconds - compute

    def restart(self) -> None:
        self.since = self.unsaved = 0.0


class _Timeline:
    """One timeline. Faults arrive on the running clock; a stopping fault's phases are downtime; a
    degraded one (a slow machine) runs at reduced speed for its detection and localisation, exposed
    to further faults (paused while the job is down), then costs its recovery."""

    def __init__(self, s: Scenario, tau: float, spares: int, rng: random.Random) -> None:
        self.rng = rng
        self.lam = s.fault_rate_s()
        self.end = s.duration_s
        self.stall = s.checkpoint_stall_s
        self.r = s.recovery
        self.classes: list[FaultClass] = list(s.faults)
        self.cum: list[float] = []
        self.acc = 0.0
        for f in self.classes:
            self.acc += f.rate
            self.cum.append(self.acc)
        self.pool = _Pool(spares, s.spare_return_days * DAY_S)
        self.lost = {f.name: dict.fromkeys(PHASES, 0.0) for f in self.classes}
        self.lost["checkpoint"] = {"stall": 0.0}
        self.productive = 0.0
        self.hours = [0.0] * math.ceil(self.end / WINDOW_S)
        self.clock = _Clock(tau, self.stall)
        self.pending: list[list] = []     # [running seconds left, class, running seconds it has had]
        self.t = 0.0
        self.checkpoint_t = 0.0           # wall time of the last checkpoint or restart: lost work spreads back to it
        self.faults = self.requeues = 0

    def play(self) -> tuple[float, dict, int, int, list]:
        """(ETTR, share of wall time lost per cause and phase, faults, requeues, ETTR of each full hour)."""
        end, pending, rng = self.end, self.pending, self.rng
        next_fault = rng.expovariate(self.lam) if self.lam > 0 else math.inf    # running seconds until it
        while self.t < end:
            step = min(next_fault, min((p[0] for p in pending), default=math.inf), end - self.t)
            self.run(step)
            if self.t >= end:
                break
            next_fault -= step
            ended = [p for p in pending if p[0] <= 1e-9]
            if ended:
                p = ended[0]
                pending.remove(p)
                self.interrupt(p[1])
                continue
            self.faults += 1
            next_fault = rng.expovariate(self.lam)
            f = self.classes[min(bisect.bisect_right(self.cum, rng.random() * self.acc), len(self.classes) - 1)]
            if f.degrades:
                pending.append([f.detect_s + f.localise_s, f, 0.0])
                if pending[-1][0] <= 0:
                    pending.pop()
                    self.interrupt(f)
                continue
            self.down(f, "detection", f.detect_s)
            self.down(f, "localisation", f.localise_s)
            if self.t < end:
                self.interrupt(f)
        full_hours = [v / WINDOW_S for v in self.hours[: int(end // WINDOW_S)]]
        return (self.productive / end, {c: {p: v / end for p, v in ph.items()} for c, ph in self.lost.items()},
                self.faults, self.requeues, full_hours)

    def run(self, seconds: float) -> None:
        """The job runs ``seconds``, at the speed its slowest degraded machine leaves it."""
        clock, t = self.clock, self.t
        slowest = max(self.pending, key=lambda p: p[1].slowdown, default=None)
        speed = 1.0 - slowest[1].slowdown if slowest else 1.0
        before = clock.since
        compute, stalled = clock.run(seconds, speed)
        self.lost["checkpoint"]["stall"] += stalled
        self.productive += speed * compute
        if slowest is not None and compute > 0:
            f = slowest[1]
            phase = "detection" if slowest[2] < f.detect_s else "localisation"
            self.lost[f.name][phase] += (1 - speed) * compute
        _spread(self.hours, t, t + seconds, speed * compute)
        if math.floor(clock.since / clock.period) > math.floor(before / clock.period):
            self.checkpoint_t = t + seconds - (clock.since % clock.period)
        for p in self.pending:
            p[0] -= seconds
            p[2] += seconds
        self.t = t + seconds

    def down(self, f: FaultClass, phase: str, seconds: float) -> None:
        seconds = min(seconds, self.end - self.t)
        self.lost[f.name][phase] += seconds
        self.t += seconds

    def interrupt(self, f: FaultClass) -> None:
        """The job restarts: from its last checkpoint, or after saving (``loses_work`` False)."""
        clock, r, rng = self.clock, self.r, self.rng
        if f.loses_work:
            self.lost[f.name]["lost_work"] += clock.unsaved
            self.productive -= clock.unsaved
            _spread(self.hours, self.checkpoint_t, self.t, -clock.unsaved)
        else:
            saving = min(self.stall, self.end - self.t)
            self.lost["checkpoint"]["stall"] += saving
            self.t += saving
        if f.planned:
            self.down(f, "recovery", r.hot_update_s)
        elif rng.random() < f.evict_share:
            over = math.floor(f.over_evict) + (rng.random() < f.over_evict - math.floor(f.over_evict))
            granted, over_caused = self.pool.take(self.t, 1 + over, over)
            self.down(f, "recovery", r.standby_s)
            if not granted:
                self.requeues += 1
                self.down(f, "over_eviction" if over_caused else "recovery", max(0.0, r.requeue_s - r.standby_s))
        else:
            self.down(f, "recovery", r.restart_s)
        clock.restart()
        self.checkpoint_t = self.t


def _window_summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    values.sort()

    def q(p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))]
    return {"mean": fmean(values), "p1": q(0.01), "p5": q(0.05), "p50": q(0.5),
            "below_90": sum(1 for v in values if v < 0.9) / len(values)}


def simulate(s: Scenario, runs: int = 200, seed: int = 0, interval_s: float | None = None,
             progress: Callable[[int], None] | None = None) -> MonteCarlo:
    """``runs`` independent timelines of ``s`` (seeded: the same seed gives the same answer);
    ``progress(1)`` after each run."""
    s.validate()
    if runs < 2:
        raise ValueError(f"runs must be >= 2 for an interval, got {runs}")
    tau = interval_s or s.checkpoint_interval_s or optimal_interval(s)
    spares = spares_for(s)
    rng = random.Random(seed)
    ettrs, faults, requeues, windows = [], [], [], []
    total: dict[str, dict[str, float]] = {}
    for _ in range(runs):
        e, lost, n, q, hours = _Timeline(s, tau, spares, rng).play()
        windows.extend(hours)
        ettrs.append(e)
        faults.append(n)
        requeues.append(q)
        for cause, phases in lost.items():
            into = total.setdefault(cause, dict.fromkeys(phases, 0.0))
            for p, v in phases.items():
                into[p] += v / runs
        if progress is not None:
            progress(1)
    mean = fmean(ettrs)
    half = Z95 * stdev(ettrs) / math.sqrt(runs)
    return MonteCarlo(mean, (mean - half, mean + half), runs, total, fmean(faults), fmean(requeues),
                      _window_summary(windows))
