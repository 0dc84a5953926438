"""Thermal throttling and power brakes: a warning alone, a gray failure when a rank of the node
actually got slower while its GPUs throttled.

A ``gpu``/``sample`` is read as its rows (events.gpu_table), not as its payload Struct: the node
stage's biggest and most frequent message is left undecoded by the payload check's quick way
(events/payloads.py), so decoding it here would be the whole cost it saves.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from faultlens.diagnosis.rules.base import Finding, opt_float
from faultlens.events.envelope import Envelope
from faultlens.events.gpu_table import gpu_table
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainStep

THROTTLE_REASONS = frozenset({"hw_thermal", "sw_thermal", "hw_power_brake", "hw_slowdown"})
HOT_C = 90.0
# A rank of the node must be this much slower than its own pre-throttle baseline, or than the
# node's other ranks (a single hot GPU slows one rank; the other seven are its local peers).
SLOWDOWN_RATIO = 1.15
# SM clock under this share of its maximum counts as lost clocks (named in the detail).
LOST_CLOCK_RATIO = 0.9


@dataclass(slots=True)
class _NodeHeat:
    since: float | None = None
    gpus: set[str] = field(default_factory=set)
    evidence: deque = field(default_factory=lambda: deque(maxlen=8))
    baseline: dict[int, deque] = field(default_factory=dict)  # rank → compute times before throttling
    recent: dict[int, deque] = field(default_factory=dict)  # rank → compute times while throttled
    reason: str = ""
    power: bool = False  # a power brake rather than heat
    fired: bool = False


class ThermalRule:
    """Throttling alone is a warning; throttling while a rank of this node got slower is a gray failure.

    Slower means a rank's compute (else step) time rose SLOWDOWN_RATIO over its own baseline before
    the throttling began, or over the median of the node's other ranks during it."""

    sources = frozenset({"gpu", "train"})

    def __init__(self, ratio: float = SLOWDOWN_RATIO, hot_c: float = HOT_C, min_recent: int = 3) -> None:
        self.ratio = ratio
        self.hot_c = hot_c
        self.min_recent = min_recent
        self._nodes: dict[tuple[str, str], _NodeHeat] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        state = self._nodes.get((event.job, event.node))
        if state is None:
            state = self._nodes[(event.job, event.node)] = _NodeHeat()
        if event.source == "gpu" and event.kind == "sample":
            return self._sample(event, state)
        if event.source == "train" and event.kind == "step":
            return list(self.observe_step(event, typed(event, TrainStep)))  # read once by the node stage's payload check
        return []

    def observe_step(self, event: Envelope, step: TrainStep) -> Sequence[Finding]:
        """A ``train``/``step`` whose payload the caller read (the node stage's step path); an empty tuple
        where nothing throttles (no list a step: issue 56)."""
        state = self._nodes.get((event.job, event.node))
        if state is None:
            state = self._nodes[(event.job, event.node)] = _NodeHeat()
        t = step.compute_s
        if t is None:
            t = step.step_time_s
        rank = step.rank
        if t is None or t <= 0.0 or rank is None:  # (0.0: a float against a float is the specialised compare)
            return ()
        if state.since is None:  # the usual step: a baseline time, nothing to confirm
            times = state.baseline.get(rank)
            if times is None:
                times = state.baseline[rank] = deque(maxlen=60)
            times.append(t)
            return ()
        times = state.recent.get(rank)
        if times is None:
            times = state.recent[rank] = deque(maxlen=10)
        times.append(t)
        return self._confirm(event, state, rank)

    def _sample(self, event: Envelope, state: _NodeHeat) -> list[Finding]:
        table = gpu_table(event)
        if table is not None and self.hot_c > 0 and not table.any_throttle(THROTTLE_REASONS) \
                and max(filter(None, table.column("temp_c")), default=0.0) < self.hot_c:
            # The usual sample: nothing throttled, nothing hot (zeros and nulls are never hot).
            if state.since is not None:
                self._cooled(state)
            return []
        gpus = event.data.get("gpus")
        if not isinstance(gpus, list):
            return []  # MemoryHealthRule dead-letters the malformed sample
        hot = set()
        why = []
        power = False
        for g in gpus:
            if not isinstance(g, Mapping):
                continue
            reasons = THROTTLE_REASONS.intersection(g.get("throttle") or ())
            temp = opt_float(g, "temp_c")
            if reasons or (temp is not None and temp >= self.hot_c):
                idx = str(g.get("index", "?"))
                hot.add(idx)
                power = power or reasons == {"hw_power_brake"}
                clock, cmax = opt_float(g, "sm_clock_mhz"), opt_float(g, "sm_clock_max_mhz")
                lost = f", SM clock {clock:.0f} of {cmax:.0f} MHz" if clock is not None and cmax and clock < LOST_CLOCK_RATIO * cmax else ""
                why.append(f"GPU {idx} {'/'.join(sorted(reasons)) or 'hot'} at {temp if temp is not None else '?'}°C{lost}")
        if hot:
            if state.since is None:
                state.since = event.ts
                state.recent.clear()
            state.gpus |= hot
            state.power = power
            state.evidence.append(event.id)
            state.reason = "; ".join(why[:4])
        elif state.since is not None:
            self._cooled(state)
        return []

    @staticmethod
    def _cooled(state: _NodeHeat) -> None:
        state.since = None
        state.fired = False
        state.gpus.clear()
        state.recent.clear()

    def _slowdown(self, state: _NodeHeat, rank: int) -> str | None:
        recent = state.recent.get(rank)
        if recent is None or len(recent) < self.min_recent:
            return None
        now = statistics.median(recent)
        base = state.baseline.get(rank)
        if base is not None and len(base) >= self.min_recent:
            before = statistics.median(base)
            if before > 0 and now >= self.ratio * before:
                return f"rank {rank} compute {now:.3f}s vs {before:.3f}s before throttling ({now / before:.2f}×)"
        peers = [statistics.median(q) for r, q in state.recent.items() if r != rank and len(q) >= self.min_recent]
        if len(peers) >= 2:
            local = statistics.median(peers)
            if local > 0 and now >= self.ratio * local:
                return f"rank {rank} compute {now:.3f}s vs {local:.3f}s on the node's other ranks ({now / local:.2f}×)"
        return None

    def _confirm(self, event: Envelope, state: _NodeHeat, rank: int) -> list[Finding]:
        if state.since is None or state.fired:
            return []  # one finding per throttling episode
        slow = self._slowdown(state, rank)
        if slow is None:
            return []
        state.fired = True
        what = "power brake" if state.power else "thermal throttling"
        return [Finding(
            job=event.job, ts=event.ts, onset=state.since, fault="gpu_thermal", action="evict",
            nodes=(event.node,), ranks=(rank,), entity="thermal", evidence=tuple(state.evidence) + (event.id,),
            detail=f"{what}: {state.reason}; {slow}",
        )]

    def tick(self, now: float) -> list[Finding]:
        return []
