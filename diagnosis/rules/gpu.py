"""GPU rules: Xid codes, NVML memory-health counters, a lost GPU, thermal throttling.

Xid events arrive already classified (the kernel-log parser and the NVML event reader put the Xid
table's fault and action on them); these rules add what one line cannot know: whether the Xid
is the echo of an earlier one (45 after any Xid, 43 after a burst of 13), whether a counter
*increased* rather than merely being non-zero, and whether throttling actually slowed training.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from dataclasses import dataclass, field

from parsing.xid_table import lookup
from diagnosis.rules.base import Finding, line_of, need, need_int, num, opt_float, parsed_fault
from streams.events import Envelope, InvalidEvent

log = logging.getLogger(__name__)

# Xids the application causes (bad kernel, MMU fault from user memory, a reset after either).
APP_XIDS = frozenset({13, 31, 43})
# Xid 43 within this long after Xid 13 on the same node is the reset that the 13 caused.
APP_BURST_S = 120.0
# Long enough for an NVML sample or two (samples come every 1-10 s).
MEMORY_HOLD_S = 25.0


def _xid_info(code: int):
    """The project's Xid table entry, or None for a code it cannot read."""
    try:
        return lookup(code)
    except (KeyError, ValueError):
        return None


class XidRule:
    sources = frozenset({"kernel", "gpu"})

    def __init__(self) -> None:
        self._last_app_xid: dict[str, float] = {}
        self._last_any_xid: dict[str, float] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind != "xid":
            return []
        data = event.data
        code = need_int(data, "xid", event)
        info = _xid_info(code)
        default_fault = getattr(info, "fault", None) or ("app_fault" if code in APP_XIDS else "unknown")
        default_action = getattr(info, "action", None) or ("reattempt" if code in APP_XIDS else "none")
        fault, action = parsed_fault(event, default_fault, default_action)
        gpu = data.get("gpu", data.get("pci", ""))
        node = event.node
        sympathetic = bool(getattr(info, "sympathetic", False)) or code == 45
        if code == 43:
            # The table calls 43 an echo; it is one only after the 13/31 that caused it. Alone it is
            # an application fault on that GPU (DESIGN.md §3: reattempt, evict if it repeats).
            sympathetic = event.ts - self._last_app_xid.get(node, -1e18) <= APP_BURST_S
            fault, action = "app_fault", "reattempt"
        if code in (13, 31):
            self._last_app_xid[node] = event.ts
        self._last_any_xid[node] = event.ts
        mnemonic = data.get("mnemonic") or getattr(info, "mnemonic", "") or ""
        # A contained memory error (Xid 94) is the application's problem unless the GPU's ECC / remap
        # counters show the memory failing: wait for the next NVML samples before blaming the app.
        hold = MEMORY_HOLD_S if fault == "app_fault" and getattr(info, "memory", False) else 0.0
        return [Finding(
            job=event.job, ts=event.ts, fault=fault, action=action, nodes=(node,), hold_s=hold,
            entity=f"gpu:{gpu}", evidence=(event.id,), sympathetic=sympathetic,
            detail=f"Xid {code} {mnemonic} on GPU {gpu}: {line_of(event)}".strip(),
        )]

    def tick(self, now: float) -> list[Finding]:
        return []


class GpuLostRule:
    """A GPU that fell off the bus (kernel text) or whose NVML handle is gone: evict at once."""

    sources = frozenset({"kernel", "gpu"})

    def observe(self, event: Envelope) -> list[Finding]:
        if not ((event.source == "kernel" and event.kind == "gpu_lost") or (event.source == "gpu" and event.kind == "lost")):
            return []
        gpu = event.data.get("gpu", event.data.get("pci", ""))
        why = event.data.get("error") or line_of(event)
        return [Finding(
            job=event.job, ts=event.ts, fault="gpu_lost", action="evict", nodes=(event.node,),
            entity=f"gpu:{gpu}", evidence=(event.id,), detail=f"GPU {gpu} lost: {why}",
        )]

    def tick(self, now: float) -> list[Finding]:
        return []


# NVIDIA retires at most 64 pages per GPU before the board needs replacing; alert well before that.
RETIRED_PAGES_LIMIT = 48


@dataclass(slots=True)
class _Counters:
    dbe: float | None = None
    remap_unc: float | None = None
    states: frozenset[str] = frozenset()


class MemoryHealthRule:
    """ECC and row-remap health from NVML samples: a change for the worse, not a standing count."""

    sources = frozenset({"gpu"})

    def __init__(self, retired_limit: int = RETIRED_PAGES_LIMIT) -> None:
        self.retired_limit = retired_limit
        self._prev: dict[tuple[str, str], _Counters] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind != "sample":
            return []
        gpus = need(event.data, "gpus", event)
        if not isinstance(gpus, list):
            raise InvalidEvent("data.gpus", "must be a list of per-GPU samples")
        out: list[Finding] = []
        for g in gpus:
            if not isinstance(g, dict):
                raise InvalidEvent("data.gpus[]", "each GPU sample must be an object")
            idx = str(g.get("index", g.get("uuid", "?")))
            key = (event.node, idx)
            prev = self._prev.get(key)
            if prev is None:
                prev = self._prev[key] = _Counters()
            dbe = _max_of(g, "ecc_dbe_volatile", "ecc_dbe_aggregate")
            remap_unc = num(g.get("remap_uncorrectable"))
            retired = (num(g.get("retired_pages_sbe")) or 0) + (num(g.get("retired_pages_dbe")) or 0)
            remap_failure = _truthy(g.get("remap_failure"))
            pending = _truthy(g.get("remap_pending")) or _truthy(g.get("retired_pending"))
            reasons = []
            if dbe is not None and prev.dbe is not None and dbe > prev.dbe:
                reasons.append(f"uncorrectable ECC errors rose {prev.dbe:g} → {dbe:g}")
            if remap_unc is not None and prev.remap_unc is not None and remap_unc > prev.remap_unc:
                reasons.append(f"uncorrectable row remaps rose {prev.remap_unc:g} → {remap_unc:g}")
            if remap_failure or pending or retired > self.retired_limit or prev.states:
                states = {}
                if remap_failure:
                    states["remap_failure"] = "row remapping failed"
                if pending:
                    states["pending"] = "a remap / page retirement is pending (needs a GPU reset)"
                if retired > self.retired_limit:
                    states["retired"] = f"retired pages over the limit of {self.retired_limit} ({retired:g})"
                # A standing bad state is reported when it appears, not on every sample while it lasts.
                reasons.extend(text for name, text in states.items() if name not in prev.states)
                prev.states = frozenset(states)
            if dbe is not None:
                prev.dbe = dbe
            if remap_unc is not None:
                prev.remap_unc = remap_unc
            if reasons:
                out.append(Finding(
                    job=event.job, ts=event.ts, fault="gpu_memory", action="evict", nodes=(event.node,),
                    entity=f"gpu:{idx}", evidence=(event.id,), detail=f"GPU {idx}: " + "; ".join(reasons),
                ))
        return out

    def tick(self, now: float) -> list[Finding]:
        return []


def _max_of(g: dict, a: str, b: str) -> float | None:
    x, y = num(g.get(a)), num(g.get(b))
    if x is None:
        return y
    return x if y is None or x >= y else y


def _truthy(value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value > 0
    return False


THROTTLE_REASONS = frozenset({"hw_thermal", "sw_thermal", "hw_power_brake", "hw_slowdown"})
HOT_C = 90.0
# The node's step (or compute) time must rise this much over its own pre-throttle baseline.
SLOWDOWN_RATIO = 1.15


@dataclass(slots=True)
class _NodeHeat:
    since: float | None = None
    gpus: set[str] = field(default_factory=set)
    evidence: deque = field(default_factory=lambda: deque(maxlen=8))
    baseline: deque = field(default_factory=lambda: deque(maxlen=60))
    recent: deque = field(default_factory=lambda: deque(maxlen=10))
    reason: str = ""
    fired: bool = False


class ThermalRule:
    """Throttling alone is a warning; throttling while this node's steps got slower is a gray failure."""

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
            t = opt_float(event.data, "compute_s")
            if t is None:
                t = opt_float(event.data, "step_time_s")
            if t is None or t <= 0:
                return []
            (state.recent if state.since is not None else state.baseline).append(t)
            return self._confirm(event, state)
        return []

    def _sample(self, event: Envelope, state: _NodeHeat) -> list[Finding]:
        gpus = event.data.get("gpus")
        if not isinstance(gpus, list):
            return []  # MemoryHealthRule dead-letters the malformed sample
        hot = set()
        why = []
        for g in gpus:
            if not isinstance(g, dict):
                continue
            reasons = THROTTLE_REASONS.intersection(g.get("throttle") or ())
            temp = opt_float(g, "temp_c")
            if reasons or (temp is not None and temp >= self.hot_c):
                idx = str(g.get("index", "?"))
                hot.add(idx)
                why.append(f"GPU {idx} {'/'.join(sorted(reasons)) or 'hot'} at {temp if temp is not None else '?'}°C")
        if hot:
            if state.since is None:
                state.since = event.ts
                state.recent.clear()
            state.gpus |= hot
            state.evidence.append(event.id)
            state.reason = "; ".join(why[:4])
        elif state.since is not None:
            state.since = None
            state.fired = False
            state.gpus.clear()
            state.recent.clear()
        return []

    def _confirm(self, event: Envelope, state: _NodeHeat) -> list[Finding]:
        if state.since is None or state.fired or len(state.recent) < self.min_recent or len(state.baseline) < self.min_recent:
            return []  # one finding per throttling episode
        base = statistics.median(state.baseline)
        now = statistics.median(state.recent)
        if base <= 0 or now < self.ratio * base:
            return []
        state.fired = True
        return [Finding(
            job=event.job, ts=event.ts, onset=state.since, fault="gpu_thermal", action="evict",
            nodes=(event.node,), entity="thermal", evidence=tuple(state.evidence) + (event.id,),
            detail=f"{state.reason}; step time {now:.3f}s vs {base:.3f}s before throttling ({now / base:.2f}×)",
        )]

    def tick(self, now: float) -> list[Finding]:
        return []
