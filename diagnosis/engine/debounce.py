"""Debounce of grey evidence (docs/design.md §3, "Debounce"): one line classified only by the
subsystem that wrote it, or only by the line model, is a suspicion; the same suspicion again on
the same machine within a while, or another signal about that machine, makes it a finding.

Which findings wait, and for how many occurrences within how long, is data (thresholds.toml
``[[debounce]]``, matched by rule id or fault class). A finding that waits is counted
(``debounced``) and remembered; the one that completes the count goes on with the first one's
onset and the evidence of all. Event time only, so the same on a live stream and offline.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque

from faultlens.diagnosis.engine.thresholds import Thresholds
from faultlens.diagnosis.rules.base import Finding

_QUIET = frozenset({"none"})


def rule_of(f: Finding) -> str:
    """The rule id ``[[debounce]]`` matches: the finding's (Finding.rule_id: a line-catalogue rule's
    ``subsystem.nvme``, ``xid.74``, a detector's name)."""
    return f.rule_id


class Debounce:
    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._seen: dict[tuple[str, str, str], deque[tuple[float, tuple[str, ...]]]] = {}
        # (job, node) → (ts, entity) of every signal about the machine lately, debounced ones too
        self._signals: dict[tuple[str, str], deque[tuple[float, str]]] = {}
        self.stats: Counter = Counter()

    def admit(self, f: Finding) -> list[Finding]:
        if len(f.nodes) != 1 or f.sympathetic or f.action in _QUIET:
            return [f]
        entry = self.thresholds.debounce_for(rule_of(f), str(f.fault))
        node = f.nodes[0]
        signals = self._signals.setdefault((f.job, node), deque(maxlen=16))
        if entry is None:
            signals.append((f.ts, f.entity))
            return [f]
        key = (f.job, node, f.entity)
        seen = self._seen.setdefault(key, deque())
        seen.append((f.ts, f.evidence))
        while seen and f.ts - seen[0][0] > entry.within_s:
            seen.popleft()
        second = entry.second_signal and any(e != f.entity and 0 <= f.ts - ts <= entry.within_s for ts, e in signals)
        signals.append((f.ts, f.entity))
        if len(seen) < entry.count and not second:
            self.stats["debounced"] += 1
            return []
        first = seen[0][0]
        evidence = tuple(dict.fromkeys(e for _, ev in seen for e in ev))[:32]
        why = f"{len(seen)} within {entry.within_s:.0f}s" if len(seen) >= entry.count else "with a second signal"
        onset = min(first, f.onset if f.onset is not None else f.ts)
        return [dataclasses.replace(f, onset=onset, evidence=evidence, detail=f"{f.detail} [debounced: {why}]")]
