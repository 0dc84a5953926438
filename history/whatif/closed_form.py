"""The closed form of the ETTR model: one renewal cycle, exact in expectation.

A cycle is a run until the next fault (exponential, rate = nodes x sum of per-node rates: Meta's
series model), then the fault's detection, localisation and recovery. While running, the trainer
computes ``tau`` seconds and stalls ``c`` seconds to checkpoint; a fault loses the work since the
last completed checkpoint. With X ~ Exp(lam) and P = tau + c, the complete periods K and the partial
period u have closed expectations (K is geometric, u a truncated exponential), so the lost work is
E[min(u, tau)] exactly rather than Young's tau / 2 (which it tends to when lam * tau is small).

The spares are a loss system (``_taken_cdf``): an eviction finds the pool short when the machines
other evictions hold leave fewer than it needs, and then pays a requeue; the one approximation is
that evictions arrive at the running share of the wall-time rate; the Monte-Carlo engine (monte_carlo.py) runs the pool for real and the tests check
the two agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from faultlens.history.whatif.model import DAY_S, PHASES, FaultClass, Scenario
from faultlens.remediation.pool import standby_size

# The interval search: Young's interval times/divided by this, in log space.
_SEARCH_SPAN = 30.0
_MIN_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Projection:
    ettr: float
    checkpoint_interval_s: float
    breakdown: dict[str, dict[str, float]]   # cause -> phase -> share of wall time; sums to 1 - ettr
    faults_expected: float                   # over the job's wall time
    spares: int
    spare_short_probability: float           # of an eviction finding the pool too short

    def lost(self) -> float:
        return sum(v for phases in self.breakdown.values() for v in phases.values())


def spares_for(s: Scenario) -> int:
    """The scenario's spares, or the warm standby pool's own sizing (docs/design.md §6: the binomial P99 of
    machines evicted at once) at the rate the job's evictions take machines."""
    if s.spares is not None:
        return s.spares
    daily = sum(f.rate * f.evict_share * (1.0 + f.over_evict) for f in s.faults if not f.planned)
    return standby_size(s.nodes, daily_failure_rate=min(daily, 1.0), window_days=s.spare_return_days)


def young_interval(stall_s: float, mtbf_s: float) -> float:
    """Young (1974): sqrt(2 c M); Daly (2006) adds higher-order terms that matter only when c ~ M."""
    return math.sqrt(2.0 * stall_s * mtbf_s)


def daly_interval(stall_s: float, mtbf_s: float) -> float:
    """Daly (2006), the higher-order estimate of the optimum compute time between checkpoints."""
    if stall_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = stall_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * stall_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - stall_s


def _batch_sizes(need: float) -> dict[int, float]:
    """Machines one eviction takes when ``need`` is a mean: its floor or ceiling, weighted."""
    low = math.floor(need)
    frac = need - low
    return {low: 1.0 - frac, low + 1: frac} if frac else {low: 1.0}


def _taken_cdf(events: float, sizes: dict[int, float], spares: int) -> list[float]:
    """P(machines on loan <= k) for k = 0..spares, as an eviction finds the pool.

    Evictions arrive as a Poisson stream, each takes a batch (culprit + over-evicted) for the return
    window, and one the pool cannot serve goes to a requeue and takes nothing: a multi-rate loss
    system, whose occupancy is Kaufman-Roberts' recursion (the same for any holding-time law, so a
    fixed return window is fine) and which Poisson arrivals see as it is (PASTA)."""
    if spares < 0:
        return []
    g = [1.0] + [0.0] * spares
    for k in range(1, spares + 1):
        g[k] = events / k * sum(j * sizes.get(j, 0.0) * g[k - j] for j in range(1, k + 1))
    total = sum(g)
    out, acc = [], 0.0
    for v in g:
        acc += v / total
        out.append(min(acc, 1.0))
    return out


def _short_probability(spares: int, cdf: list[float], need: float) -> float:
    """An eviction needing ``need`` machines (a mean: floor or ceil) finds fewer than that free."""
    def short(n: int) -> float:
        return 1.0 if spares - n < 0 else 1.0 - cdf[spares - n]
    return sum(w * short(n) for n, w in _batch_sizes(need).items())


def _run_moments(lam: float, tau: float, stall: float) -> tuple[float, float, float]:
    """(E[compute in complete periods], E[stall], E[compute in the partial period]) of a run X ~ Exp(lam)."""
    period = tau + stall
    q = math.exp(-lam * period)
    one_q = -math.expm1(-lam * period)
    periods = q / one_q
    e_tau = math.exp(-lam * tau)
    partial_compute = ((-math.expm1(-lam * tau) - lam * tau * e_tau) / lam + tau * (e_tau - q)) / one_q
    partial = 1.0 / lam - period * periods
    return tau * periods, stall * periods + (partial - partial_compute), partial_compute


def _recovery(f: FaultClass, s: Scenario, short: float, short_no_over: float) -> tuple[float, float]:
    """(recovery s, extra s that over-eviction's drain of the pool costs) of one fault."""
    r = s.recovery
    if f.planned:
        return r.hot_update_s, 0.0
    extra = max(0.0, r.requeue_s - r.standby_s)
    recovery = f.evict_share * (r.standby_s + short_no_over * extra) + (1 - f.evict_share) * r.restart_s
    return recovery, f.evict_share * max(0.0, short - short_no_over) * extra


def project(s: Scenario, interval_s: float | None = None) -> Projection:
    """The expected ETTR of ``s`` and where the rest of the wall time goes."""
    s.validate()
    tau = interval_s or s.checkpoint_interval_s or optimal_interval(s)
    return _project(s, tau)


def _project(s: Scenario, tau: float) -> Projection:
    lam = s.fault_rate_s()
    stall = s.checkpoint_stall_s
    spares = spares_for(s)
    if lam == 0:
        share = stall / (tau + stall)
        return Projection(1 - share, tau, {"checkpoint": {"stall": share}}, 0.0, spares, 0.0)
    moments = _run_moments(lam, tau, stall)
    # Faults arrive while the job runs, so the pool sees evictions at the running share of the
    # wall time; that share depends on the shortages it causes: a few passes settle it.
    running = 1.0
    for _ in range(4):
        cycle, productive, seconds, short_mean = _cycle(s, lam, spares, running, moments)
        running = (1 / lam) / cycle
    breakdown = {name: {p: phases[p] / cycle for p in PHASES} for name, phases in seconds.items()}
    breakdown["checkpoint"] = {"stall": moments[1] / cycle}
    return Projection(productive / cycle, tau, breakdown, s.duration_s / cycle, spares, short_mean)


def _cycle(s: Scenario, lam: float, spares: int, running: float,
           moments: tuple[float, float, float]) -> tuple[float, float, dict[str, dict[str, float]], float]:
    """(cycle length, productive seconds, lost seconds by class and phase, P(short) of an eviction)."""
    full, _, partial = moments
    total_rate = sum(f.rate for f in s.faults)
    weights = {f.name: f.rate / total_rate for f in s.faults}
    evictors = [f for f in s.faults if not f.planned]
    per_s = s.nodes / DAY_S
    window = s.spare_return_days * DAY_S
    events, sizes = 0.0, {}
    for f in evictors:
        mean = window * running * per_s * f.rate * f.evict_share
        events += mean
        for n, w in _batch_sizes(1.0 + f.over_evict).items():
            sizes[n] = sizes.get(n, 0.0) + mean * w
    sizes = {n: v / events for n, v in sizes.items()} if events else {}
    cdf = _taken_cdf(events, sizes, spares)
    short_no_over = _short_probability(spares, _taken_cdf(events, {1: 1.0}, spares), 1.0)

    cycle = 1 / lam
    productive = full
    seconds: dict[str, dict[str, float]] = {}
    short_sum = evict_sum = 0.0
    for f in s.faults:
        w = weights[f.name]
        short = _short_probability(spares, cdf, 1.0 + f.over_evict)
        recovery, over = _recovery(f, s, short, short_no_over)
        if not f.planned:
            short_sum += w * f.evict_share * short
            evict_sum += w * f.evict_share
        cycle += w * (f.detect_s + f.localise_s + recovery + over)
        productive += w * ((1 - f.slowdown) * (f.detect_s + f.localise_s) + (0.0 if f.loses_work else partial))
        seconds[f.name] = {
            "detection": w * f.slowdown * f.detect_s,
            "localisation": w * f.slowdown * f.localise_s,
            "recovery": w * recovery,
            "over_eviction": w * over,
            "lost_work": w * partial if f.loses_work else 0.0,
        }
    return cycle, productive, seconds, short_sum / evict_sum if evict_sum else 0.0


def optimal_interval(s: Scenario) -> float:
    """The checkpoint interval that maximises the closed form's ETTR (golden-section search in log
    space around Young's interval): it weighs the stall against the lost work, as Young / Daly do, but
    with this job's own detection and recovery times in the cycle."""
    lam = s.fault_rate_s()
    cap = s.duration_s
    if lam == 0 or s.checkpoint_stall_s == 0:
        # Nothing to lose (no faults) or nothing to pay (free checkpoints): the edges.
        return cap if lam == 0 else _MIN_INTERVAL_S
    young = young_interval(s.checkpoint_stall_s, 1 / lam)
    lo = math.log(max(_MIN_INTERVAL_S, young / _SEARCH_SPAN))
    hi = math.log(max(min(cap, young * _SEARCH_SPAN), math.exp(lo)))
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = _project(s, math.exp(c)).ettr, _project(s, math.exp(d)).ettr
    for _ in range(80):
        if fc > fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = _project(s, math.exp(c)).ettr
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = _project(s, math.exp(d)).ettr
    return math.exp((a + b) / 2)
