"""GPU memory health from NVML samples: ECC and row-remap counters that *increased* (not merely
non-zero) and bad remap / retirement states when they appear.

A ``gpu``/``sample`` is read as its rows (events.gpu_table), not as its payload Struct: the node
stage's biggest and most frequent message is left undecoded by the payload check's quick way
(events/payloads.py), so decoding it here would be the whole cost it saves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter, itemgetter

from faultlens.diagnosis.rules.base import Finding, need, num
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.gpu_table import TABLE_NUMBERS, gpu_table

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
