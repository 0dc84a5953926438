"""What is worth fixing first: the closed form rerun with one input changed at a time.

Each row is a change an SRE could buy (faster detection of one class, a better checkpoint interval,
no over-eviction, ...) and the ETTR points it moves, largest first. The closed form is used, not the
Monte Carlo: a row is a difference of two projections, which the Monte Carlo's noise would swamp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from faultlens.history.whatif.closed_form import optimal_interval, project
from faultlens.history.whatif.model import Scenario


@dataclass(frozen=True)
class Change:
    what: str
    ettr: float
    points: float    # ETTR points gained (negative: lost) against the scenario as given


def _rows(s: Scenario) -> list[tuple[str, Scenario]]:
    rows: list[tuple[str, Scenario]] = []
    for f in s.faults:
        if f.planned or f.rate == 0:
            continue
        found = f.detect_s + f.localise_s
        if found > 0:
            rows.append((f"{f.name}: detection {f.detect_s:.0f} s + localisation {f.localise_s:.0f} s halved",
                         s.with_fault(f.name, detect_s=f.detect_s / 2, localise_s=f.localise_s / 2)))
        if f.timeout_s > f.detect_s:
            rows.append((f"{f.name}: detection {f.detect_s:.0f} s -> {f.timeout_s:.0f} s (framework timeout alone)",
                         s.with_fault(f.name, detect_s=f.timeout_s)))
        if f.over_evict > 0:
            rows.append((f"{f.name}: no over-eviction ({f.over_evict:g} healthy machines per fault)",
                         s.with_fault(f.name, over_evict=0.0)))
    r = s.recovery
    if r.standby_s < r.requeue_s:
        rows.append((f"no warm standby (every eviction a {r.requeue_s:.0f} s requeue)",
                     replace(s, recovery=replace(r, standby_s=r.requeue_s))))
    rows.append(("recovery times halved", replace(s, recovery=replace(
        r, standby_s=r.standby_s / 2, requeue_s=r.requeue_s / 2, restart_s=r.restart_s / 2,
        hot_update_s=r.hot_update_s / 2))))
    if s.checkpoint_interval_s is not None:
        rows.append((f"checkpoint interval {s.checkpoint_interval_s:.0f} s -> the optimum",
                     replace(s, checkpoint_interval_s=None)))
    if s.checkpoint_stall_s > 0:
        rows.append((f"checkpoint stall {s.checkpoint_stall_s:g} s halved",
                     replace(s, checkpoint_stall_s=s.checkpoint_stall_s / 2)))
    return rows


def sensitivity(s: Scenario) -> list[Change]:
    """Every change of ``_rows`` and its effect, largest first."""
    base = project(s).ettr
    out = []
    for what, changed in _rows(s):
        # A changed job has its own optimum, unless the interval was given (then it stays fixed).
        e = project(changed, None if s.checkpoint_interval_s is not None else optimal_interval(changed)).ettr
        out.append(Change(what, e, 100.0 * (e - base)))
    return sorted(out, key=lambda c: -abs(c.points))
