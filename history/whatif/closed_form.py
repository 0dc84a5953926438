"""The closed form of the ETTR model: one renewal cycle, exact in expectation.

Rates are per node-day of running (presets.py converts a source's wall-clock count once). A cycle
is a run until the next fault (exponential on the running clock), then the fault's downtime. While running, the trainer computes
``tau`` seconds and stalls ``c`` seconds to checkpoint; a fault loses the work since the last
completed checkpoint. With X ~ Exp(lam) and P = tau + c, the complete periods K and the partial
period u have closed expectations (K is geometric, u a truncated exponential), so the lost work is
E[min(u, tau)] exactly rather than Young's tau / 2 (which it tends to when lam * tau is small).

A degraded fault (a fail-slow machine) does not stop the job: it is found over ``detect_s +
localise_s`` seconds of running at reduced speed, while other faults keep arriving (speed.py: the
phases in flight are an M/G/inf queue on the running clock), and then costs its recovery. The work a
restart loses or keeps is weighed by the speed over the stretch before it (``unsaved_work``), which
is not the mean: a slow machine's eviction ends a stretch run at its speed.

The spares are a loss system (``_taken_cdf``): an eviction finds the pool short when the machines
other evictions hold leave fewer than it needs, and then pays a requeue; the one approximation is
that evictions arrive as a Poisson stream at the running share of the rate. The Monte-Carlo engine
(monte_carlo.py) runs the same timeline fault by fault and the tests hold the two to each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from faultlens.history.whatif.model import DAY_S, PHASES, FaultClass, Scenario
from faultlens.history.whatif.speed import mean_speed, unsaved_work
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
    # Only a few batch sizes occur (floor / ceil of 1 + over_evict per class), so each step sums over
    # them, not over every j <= k; the terms are renormalised as they grow (events^k / k! overflows a
    # float for a pool of a few hundred at a high rate).
    batches = [(j, j * p) for j, p in sizes.items() if j >= 1 and p > 0]
    g = [1.0] + [0.0] * spares
    for k in range(1, spares + 1):
        g[k] = events / k * sum(jp * g[k - j] for j, jp in batches if j <= k)
        if g[k] > 1e200:
            g = [v / g[k] for v in g]
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


class Infeasible(ValueError):
    """The faults come faster than the job can absorb them: it would be down most of its time, and
    a projection would say so only after minutes of work."""


def _downtime(f: FaultClass, s: Scenario, short: float, short_no_over: float) -> tuple[float, float, float]:
    """(seconds the job is down for one fault of ``f``: found while stopped, then recovery; the part
    of them that is recovery; the extra seconds over-eviction's drain of the pool costs)."""
    r = s.recovery
    if f.planned:
        return f.detect_s + f.localise_s + r.hot_update_s, r.hot_update_s, 0.0
    extra = max(0.0, r.requeue_s - r.standby_s)
    recovery = f.evict_share * (r.standby_s + short_no_over * extra) + (1 - f.evict_share) * r.restart_s
    over = f.evict_share * max(0.0, short - short_no_over) * extra
    found = 0.0 if f.degrades else f.detect_s + f.localise_s
    return found + recovery + over, recovery, over


def project(s: Scenario, interval_s: float | None = None) -> Projection:
    """The expected ETTR of ``s`` and where the rest of the wall time goes."""
    s.validate()
    tau = interval_s or s.checkpoint_interval_s or optimal_interval(s)
    return _project(s, tau)


def _project(s: Scenario, tau: float) -> Projection:
    lam, _, spares, (cycle, productive, seconds, short_mean, stall) = _solve(s, tau)
    if lam == 0:
        share = s.checkpoint_stall_s / (tau + s.checkpoint_stall_s)
        return Projection(1 - share, tau, {"checkpoint": {"stall": share}}, 0.0, spares, 0.0)
    breakdown = {name: {p: phases[p] / cycle for p in PHASES} for name, phases in seconds.items()}
    breakdown["checkpoint"] = {"stall": stall / cycle}
    return Projection(productive / cycle, tau, breakdown, s.duration_s / cycle, spares, short_mean)


# A job down this share of its wall time by the faults' downtime alone is refused: it barely trains,
# and its Monte Carlo would walk millions of faults to say so.
MAX_DOWN_SHARE = 0.9


def _solve(s: Scenario, tau: float) -> tuple[float, float, int, tuple]:
    """(faults per running second, running share of wall time, spares, one cycle's figures)."""
    lam = s.fault_rate_s()
    spares = spares_for(s)
    if lam == 0:
        return 0.0, 1.0, spares, (1.0, 1.0, {}, 0.0, 0.0)
    # Faults arrive while the job runs, so the pool sees evictions at the running share of the
    # wall time; that share depends on the shortages it causes: a few passes settle it.
    running = 1.0
    for _ in range(4):
        out = _cycle(s, lam, spares, running, tau)
        running = (1 / lam) / out[0]
    return lam, running, spares, out


def check_feasible(s: Scenario) -> None:
    """Refuse at once a job whose faults leave it down most of the time (``MAX_DOWN_SHARE``)."""
    lam = s.fault_rate_s()
    if lam == 0:
        return
    tau = s.checkpoint_interval_s or min(s.duration_s, max(_MIN_INTERVAL_S, young_interval(
        s.checkpoint_stall_s, 1 / lam)))
    cycle = _cycle(s, lam, spares_for(s), 1.0, tau)[0]
    down = cycle - 1 / lam
    if down / cycle > MAX_DOWN_SHARE:
        raise Infeasible(
            f"{lam * DAY_S:,.0f} faults a day of running on {s.nodes:,} machines (one every {1 / lam:,.3g} s), "
            f"each keeping the job down {down:,.0f} s: down {down / cycle:.0%} of the time, the job cannot "
            f"train (are these rates a fleet's, per node-day?)")


def _cycle(s: Scenario, lam: float, spares: int, running: float, tau: float
           ) -> tuple[float, float, dict[str, dict[str, float]], float, float]:
    """One renewal cycle: a run of the job (full speed or degraded) until the next fault, then the
    fault's downtime. Returns (cycle length, productive seconds, lost seconds by class and phase,
    P(short) of an eviction, checkpoint stall seconds)."""
    stall = s.checkpoint_stall_s
    full, run_stall, partial = _run_moments(lam, tau, stall)
    speed = mean_speed(s, lam)
    total_rate = sum(f.rate for f in s.faults)
    weights = {f.name: f.rate / total_rate for f in s.faults}
    per_s = lam / total_rate                     # running seconds -> faults of a unit rate
    window = s.spare_return_days * DAY_S
    events, sizes = 0.0, dict[int, float]()
    for f in s.faults:
        if f.planned:
            continue
        mean = window * running * per_s * f.rate * f.evict_share
        events += mean
        for n, w in _batch_sizes(1.0 + f.over_evict).items():
            sizes[n] = sizes.get(n, 0.0) + mean * w
    sizes = {n: v / events for n, v in sizes.items()} if events else {}
    cdf = _taken_cdf(events, sizes, spares)
    short_no_over = _short_probability(spares, _taken_cdf(events, {1: 1.0}, spares), 1.0)

    # Time lost to slowness: the compute seconds run below full speed, shared among the degraded
    # classes by how much slowness each puts in flight (lam x share x D x slowdown).
    slow_lost = (1 - speed) * (full + partial)
    slow_weight = {f.name: w * (f.detect_s + f.localise_s) * f.slowdown
                   for f in s.faults if f.degrades for w in (weights[f.name],)}
    slow_total = sum(slow_weight.values())

    cycle = 1 / lam
    # Work done is the mean speed times the compute time; what a restart loses of it is weighed by the
    # speed over the stretch it was done in (speed.unsaved_work), not by the mean.
    productive = speed * (full + partial)
    at_fault = unsaved_work(s, lam, tau, stall, partial)
    stall_s = run_stall
    seconds: dict[str, dict[str, float]] = {}
    short_sum = evict_sum = 0.0
    for f in s.faults:
        w = weights[f.name]
        short = _short_probability(spares, cdf, 1.0 + f.over_evict)
        down, recovery, over = _downtime(f, s, short, short_no_over)
        if not f.planned:
            short_sum += w * f.evict_share * short
            evict_sum += w * f.evict_share
        cycle += w * down
        if f.loses_work:
            lost = w * (unsaved_work(s, lam, tau, stall, partial, f) if f.degrades else at_fault)
            productive -= lost
        else:
            # The trainer saves before the restart: the partial period's work is kept, for one stall.
            cycle += w * stall
            stall_s += w * stall
            lost = 0.0
        slow = slow_lost * slow_weight[f.name] / slow_total if f.name in slow_weight and slow_total else 0.0
        found = f.detect_s + f.localise_s
        detect_share = f.detect_s / found if found else 0.0
        stopped = 0.0 if f.degrades else 1.0
        seconds[f.name] = {
            "detection": w * stopped * f.detect_s + slow * detect_share,
            "localisation": w * stopped * f.localise_s + slow * (1 - detect_share),
            "recovery": w * recovery,
            "over_eviction": w * over,
            "lost_work": lost,
        }
    return cycle, productive, seconds, short_sum / evict_sum if evict_sum else 0.0, stall_s


def optimal_interval(s: Scenario) -> float:
    """The checkpoint interval that maximises the closed form's ETTR (golden-section search in log
    space around Young's interval): it weighs the stall against the lost work, as Young / Daly do, but
    with this job's own detection and recovery times in the cycle."""
    lam = s.fault_rate_s()
    cap = s.duration_s
    if lam == 0 or s.checkpoint_stall_s == 0:
        # Nothing to lose (no faults) or nothing to pay (free checkpoints): the edges.
        return cap if lam == 0 else min(_MIN_INTERVAL_S, cap)
    young = young_interval(s.checkpoint_stall_s, 1 / lam)
    # The search never leaves (1 s, the job's length): an interval longer than the job checkpoints never.
    hi = math.log(max(min(cap, young * _SEARCH_SPAN), min(cap, _MIN_INTERVAL_S)))
    lo = min(math.log(max(_MIN_INTERVAL_S, young / _SEARCH_SPAN)), hi)
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
    return min(math.exp((a + b) / 2), cap)
