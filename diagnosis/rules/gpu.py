"""GPU rules: Xid codes, NVML memory-health counters, a lost GPU, thermal throttling.

What one Xid means is parsing.xid_verdict's to say (the one owner of that verdict): the kernel-log
parser and the NVML event reader put it on their events, and XidRule takes the event's fault and
action as its producer gave them. The rest of the verdict (an echo? about memory?) it asks the same
function from the fields docs/events.md documents (``xid``, ``text``), so an event of any producer
is judged as the parser's is. These rules add what one line cannot know: whether the Xid is the
echo of an earlier one (45 after any Xid, 43 after a burst of 13, the same Xid from the other
source), whether a counter *increased* rather than merely being non-zero, and whether throttling
actually slowed training.

Events are read as their payload Structs (events.payloads.typed), except a ``gpu``/``sample``: the
node stage's biggest and most frequent message is read as its rows (events.gpu_table), which the
payload check's quick way leaves undecoded (events/payloads.py), so decoding it here would be the
whole cost it saves.
"""

from __future__ import annotations

import logging
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter

from faultlens.diagnosis.rules.base import Finding, line_of, missing, need, num, opt_float, parsed_fault
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.gpu_table import TABLE_NUMBERS, gpu_table
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainStep
from faultlens.events.payloads_node import GpuLost, GpuXid, KernelGpuLost, KernelXid
from faultlens.parsing.xid_verdict import APP_XIDS, xid_verdict

log = logging.getLogger(__name__)

# Xid 43 within this long after Xid 13 on the same node is the reset that the 13 caused.
APP_BURST_S = 120.0
# The kernel log and NVML's event API report one Xid within this many seconds of each other.
CROSS_SOURCE_S = 10.0
# Long enough for an NVML sample or two (samples come every 1-10 s).
MEMORY_HOLD_S = 25.0


def _folded_note(payload: KernelXid | GpuXid) -> str:
    """A folded event (collectors/flood_fold.py) stands for ``count`` repeats of its line: said, as
    one finding, never as ``count`` of them (NVML's event API folds nothing)."""
    if not isinstance(payload, KernelXid) or not payload.folded or payload.count is None:
        return ""
    return f" (and {payload.count} more identical line(s) folded by the agent)"


def _gpu_of(gpu: object, pci: object) -> object:
    """The GPU as the event names it: NVML's index, else the kernel's PCI address ("" for neither)."""
    return gpu if gpu is not None else "" if pci is None else pci


class XidRule:
    sources = frozenset({"kernel", "gpu"})

    def __init__(self) -> None:
        self._last_app_xid: dict[str, float] = {}
        self._last_any_xid: dict[str, float] = {}
        self._last_by_source: dict[tuple[str, str, int], tuple[float, str]] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind != "xid":
            return []
        payload = typed(event, (KernelXid, GpuXid))  # read once by the payload check (events/payloads.py)
        code = payload.xid
        if code is None:
            raise missing("xid", event)
        node = event.node
        gpu = _gpu_of(payload.gpu, payload.pci if isinstance(payload, KernelXid) else None)
        # Back into parsing.xid_verdict (the parser asked it for this line already), for two reasons:
        # an event carries the verdict's fault and action, not all of it (memory; an echo? is read
        # off the table for every producer, as a trace written from docs/events.md has it), and Xid
        # 43 is an echo only after the 13 / 31 that caused it on this node, which no line can know.
        after_app = event.ts - self._last_app_xid.get(node, -1e18) <= APP_BURST_S if code == 43 else None
        text = payload.text if isinstance(payload, KernelXid) else None  # NVML's event API gives none
        verdict = xid_verdict(code, str(text or ""), after_app_xid=after_app)
        if code == 43:
            fault, action = verdict.fault, verdict.action
        else:
            fault, action = parsed_fault(event, verdict.fault, verdict.action)
        if event.data.get("boot") is True:
            # Logged while the machine booted (parsing/kernel_quiet.py): the machine's record, no
            # action against a job, whatever the code's own reading (Xid 43 re-derives it above).
            action = "none"
        sympathetic = verdict.sympathetic
        if code in APP_XIDS:
            self._last_app_xid[node] = event.ts
        self._last_any_xid[node] = event.ts
        mnemonic = payload.mnemonic or verdict.mnemonic
        # A contained memory error (Xid 94) is the application's problem unless the GPU's ECC / remap
        # counters show the memory failing: wait for the next NVML samples before blaming the app.
        hold = MEMORY_HOLD_S if action == "reattempt" and verdict.memory else 0.0
        # The kernel log and NVML's event API both report an Xid, naming the GPU differently (PCI
        # address vs index): the second report of the same code on the node moments later is an echo.
        seen = self._last_by_source.get((event.job, node, code))
        if seen is not None and seen[1] != event.source and event.ts - seen[0] <= CROSS_SOURCE_S:
            sympathetic = True
        else:
            self._last_by_source[(event.job, node, code)] = (event.ts, event.source)
        return [Finding(
            job=event.job, ts=event.ts, fault=fault, action=action, nodes=(node,), hold_s=hold, rule=f"xid.{code}",
            entity="gpu_lost" if fault == "gpu_lost" else f"gpu:{gpu}", evidence=(event.id,), sympathetic=sympathetic,
            detail=f"Xid {code} {mnemonic} on GPU {gpu}: {line_of(event)}".strip() + _folded_note(payload),
        )]

    def tick(self, now: float) -> list[Finding]:
        return []


# NVML's answer that the GPU itself is gone; any other error (NVML_ERROR_UNKNOWN, a timeout) may be
# a hiccup of the driver call and is retried before the GPU is called lost.
NVML_GONE = ("NVML_ERROR_GPU_IS_LOST",)
# A GPU is lost after this many unreadable samples spanning at least LOST_CONFIRM_S.
LOST_CONFIRM_SAMPLES = 3
LOST_CONFIRM_S = 10.0


def _nvml_said(event: Envelope) -> object:
    """The NVML error a ``gpu``/``lost`` event reported."""
    return typed(event, GpuLost).error


@dataclass(slots=True)
class _Unsure:
    event: Envelope
    unreadable: int = 0
    last_ts: float = 0.0
    evidence: list[str] = field(default_factory=list)


class GpuLostRule:
    """A GPU that fell off the bus (kernel text) or whose NVML handle is gone: evict at once.

    An NVML error that does not say the GPU is gone is confirmed first: the GPU's row must stay
    unreadable over the next samples (LOST_CONFIRM_SAMPLES spanning LOST_CONFIRM_S); a row that
    reads again ends the doubt with a record-only note. A kernel "fallen off the bus" confirms it."""

    sources = frozenset({"kernel", "gpu"})

    def __init__(self) -> None:
        self._unsure: dict[tuple[str, str, str], _Unsure] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.source == "gpu" and event.kind == "sample" and self._unsure:
            return self._retry(event)
        if not ((event.source == "kernel" and event.kind == "gpu_lost") or (event.source == "gpu" and event.kind == "lost")):
            return []
        if event.source == "gpu":
            lost = typed(event, GpuLost)
            gpu, why = _gpu_of(lost.gpu, None), lost.error or line_of(event)
        else:
            fell = typed(event, KernelGpuLost)
            gpu, why = _gpu_of(None, fell.pci), line_of(event)
        if event.source == "gpu" and not any(code in str(why) for code in NVML_GONE):
            self._unsure.setdefault((event.job, event.node, str(gpu)), _Unsure(event, last_ts=event.ts, evidence=[event.id]))
            return []
        for key in [k for k in self._unsure if k[:2] == (event.job, event.node)]:
            del self._unsure[key]  # the kernel saw it go: one loss, one finding
        return [self._lost(event, gpu, f"GPU {gpu} lost: {why}")]

    @staticmethod
    def _lost(event: Envelope, gpu, detail: str, evidence: tuple[str, ...] | None = None, onset: float | None = None) -> Finding:
        # One entity per node: the kernel names the GPU by PCI address, NVML by index, and one loss
        # seen by both is one diagnosis.
        return Finding(
            job=event.job, ts=event.ts, onset=onset, fault="gpu_lost", action="evict", nodes=(event.node,),
            entity="gpu_lost", evidence=evidence or (event.id,), detail=detail,
        )

    def _retry(self, event: Envelope) -> list[Finding]:
        # A gpu/sample: its rows as they came (the module's docstring says why).
        gpus = event.data.get("gpus")
        if not isinstance(gpus, list):
            return []
        out: list[Finding] = []
        rows = {str(g.get("index")): g for g in gpus if isinstance(g, Mapping)}
        for key in [k for k in self._unsure if k[:2] == (event.job, event.node)]:
            u = self._unsure[key]
            row = rows.get(key[2])
            if row is None:
                continue
            if any(row.get(k) is not None for k in ("util", "temp_c", "power_w", "sm_clock_mhz")):
                del self._unsure[key]
                log.info("%s GPU %s reads again after %s: not lost", event.node, key[2], _nvml_said(u.event))
                out.append(Finding(
                    job=event.job, ts=event.ts, onset=u.event.ts, fault="gpu_lost", action="none", nodes=(event.node,),
                    entity="gpu_lost:transient", evidence=tuple(u.evidence),
                    detail=f"GPU {key[2]}: NVML said {_nvml_said(u.event)!r} once, then read normally: not lost",
                ))
                continue
            u.unreadable += 1
            u.last_ts = event.ts
            if len(u.evidence) < 8:
                u.evidence.append(event.id)
            if u.unreadable >= LOST_CONFIRM_SAMPLES and event.ts - u.event.ts >= LOST_CONFIRM_S:
                del self._unsure[key]
                out.append(self._lost(event, key[2], f"GPU {key[2]} lost: NVML {_nvml_said(u.event)!r}, then "
                                                     f"{u.unreadable} unreadable samples over {event.ts - u.event.ts:.0f}s",
                                      tuple(u.evidence), onset=u.event.ts))
        return out

    def tick(self, now: float) -> list[Finding]:
        return []


# NVIDIA retires at most 64 pages per GPU before the board needs replacing; alert well before that.
RETIRED_PAGES_LIMIT = 48


@dataclass(slots=True)
class _Counters:
    dbe: float | None = None
    remap_unc: float | None = None
    states: frozenset[str] = frozenset()
    seen: tuple | None = None  # the raw fields last judged: the same again cannot change anything


_MEMORY_FIELDS = ("ecc_dbe_volatile", "ecc_dbe_aggregate", "remap_uncorrectable", "retired_pages_sbe",
                  "retired_pages_dbe", "remap_failure", "remap_pending", "retired_pending")
# What names a GPU and what the rule judges of it: a node's sample that repeats its last one in
# all of these cannot change anything.
_STATE_FIELDS = tuple(f for f in _MEMORY_FIELDS if f not in TABLE_NUMBERS)
_memory_states = itemgetter(*_STATE_FIELDS)
_reading_states = attrgetter(*_STATE_FIELDS)  # a typed row (events.gpu_reading): left out is UNSET
_W = len(TABLE_NUMBERS)
_DBE_V, _DBE_A, _REMAP_U, _RETIRED_S, _RETIRED_D = (TABLE_NUMBERS.index(f) for f in _MEMORY_FIELDS if f in TABLE_NUMBERS)


class MemoryHealthRule:
    """ECC and row-remap health from NVML samples: a change for the worse, not a standing count."""

    sources = frozenset({"gpu"})

    def __init__(self, retired_limit: int = RETIRED_PAGES_LIMIT) -> None:
        self.retired_limit = retired_limit
        self._prev: dict[tuple[str, str], _Counters] = {}
        # node → the memory key of its last sample, when every GPU of it was judged (one per node).
        self._last: dict[str, tuple] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind != "sample":
            return []
        table = gpu_table(event)
        key = None
        if table is not None:
            try:
                states = list(map(_reading_states if table.typed else _memory_states, table.gpus))
            except KeyError:  # a state key left out: judged GPU by GPU
                pass
            else:
                n = table.numbers
                key = (n[_DBE_V::_W], n[_DBE_A::_W], n[_REMAP_U::_W], n[_RETIRED_S::_W], n[_RETIRED_D::_W], states,
                       table.index, table.uuid)
                if self._last.get(event.node) == key:
                    return []
        # Whatever is judged now moves the GPUs' state away from the remembered sample.
        self._last.pop(event.node, None)
        out = self._judge(event)
        # Two GPUs of one index share their counters: only a sample that names each once leaves
        # every GPU's state at this sample's values.
        if key is not None and table is not None and len(set(map(str, table.index))) == len(table.index):
            self._last[event.node] = key
        return out

    def _judge(self, event: Envelope) -> list[Finding]:
        gpus = need(event.data, "gpus", event)
        if not isinstance(gpus, list):
            raise InvalidEvent("data.gpus", "must be a list of per-GPU samples")
        out: list[Finding] = []
        for g in gpus:
            if not isinstance(g, Mapping):
                raise InvalidEvent("data.gpus[]", "each GPU sample must be an object")
            idx = str(g.get("index", g.get("uuid", "?")))
            key = (event.node, idx)
            prev = self._prev.get(key)
            if prev is None:
                prev = self._prev[key] = _Counters()
            # Nearly every sample repeats the last one's counters (they move on a fault only).
            seen = tuple(map(g.get, _MEMORY_FIELDS))
            if seen == prev.seen:
                continue
            prev.seen = seen
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


def _max_of(g: Mapping, a: str, b: str) -> float | None:
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
            step = typed(event, TrainStep)  # read once by the node stage's payload check
            t = step.compute_s if step.compute_s is not None else step.step_time_s
            rank = step.rank
            if t is None or t <= 0 or rank is None:
                return []
            book = state.recent if state.since is not None else state.baseline
            times = book.get(rank)
            if times is None:
                times = book[rank] = deque(maxlen=60 if book is state.baseline else 10)
            times.append(t)
            if state.since is None:
                return []  # _confirm: nothing throttles
            return self._confirm(event, state, rank)
        return []

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
