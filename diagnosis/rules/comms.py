"""Collective-communication failures: blame the FIRST failing rank, not every rank that timed out.

When one rank dies or stalls, every peer in its communicators hits the NCCL watchdog a little
later: the timeouts are sympathetic. This job-level detector gathers a job's NCCL errors and
watchdog timeouts for ``collect_s`` after the first one, then names one culprit: the earliest
hard NCCL error if any rank reported one, else the rank stuck at the lowest collective sequence
number (it fell behind first), ties broken by the earliest report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnosis.detector import JobBook
from diagnosis.rules.base import Finding, line_of, opt_int
from streams.events import Envelope

COLLECT_S = 30.0


@dataclass(frozen=True, slots=True)
class _Report:
    ts: float
    rank: int | None
    node: str
    seq: int | None
    hard: bool
    id: str
    text: str


@dataclass(slots=True)
class _Incident:
    first_ts: float
    reports: list[_Report] = field(default_factory=list)


class FirstFailingRank:
    """Job-level: needs every rank's reports (and the topology to place ranks on nodes)."""

    sources = frozenset({"nccl"})

    def __init__(self, book: JobBook, collect_s: float = COLLECT_S) -> None:
        self.book = book
        self.collect_s = collect_s
        self._open: dict[str, _Incident] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind not in ("nccl_timeout", "nccl_error"):
            return []
        rank = opt_int(event.data, "rank")
        seq = opt_int(event.data, "seq")
        text = str(event.data.get("error") or event.data.get("op") or line_of(event))
        incident = self._open.setdefault(event.job, _Incident(event.ts))
        incident.reports.append(_Report(event.ts, rank, event.node, seq, event.kind == "nccl_error", event.id, text))
        return []

    def tick(self, now: float) -> list[Finding]:
        done = [job for job, inc in self._open.items() if now - inc.first_ts >= self.collect_s]
        return [self._decide(job, self._open.pop(job)) for job in done]

    def flush(self) -> list[Finding]:
        jobs = list(self._open)
        return [self._decide(job, self._open.pop(job)) for job in jobs]

    def _decide(self, job: str, inc: _Incident) -> Finding:
        hard = [r for r in inc.reports if r.hard]
        if hard:
            culprit = min(hard, key=lambda r: r.ts)
            why = f"earliest hard NCCL error ({culprit.text})"
        else:
            culprit = min(inc.reports, key=lambda r: (r.seq if r.seq is not None else 1 << 62, r.ts))
            why = f"lowest collective SeqNum {culprit.seq} ({culprit.text})"
        node = culprit.node
        if culprit.rank is not None:
            node = self.book.rank_node(job, culprit.rank) or node
        waiting = sorted({r.rank for r in inc.reports if r.rank is not None and r.rank != culprit.rank})
        return Finding(
            job=job, ts=max(r.ts for r in inc.reports), onset=inc.first_ts, fault="nccl_error", action="reattempt",
            nodes=(node,), ranks=(culprit.rank,) if culprit.rank is not None else (), entity="nccl",
            evidence=tuple(r.id for r in sorted(inc.reports, key=lambda r: r.ts))[:32],
            detail=f"first failing rank {culprit.rank} on {node}: {why}; {len(waiting)} other rank(s) only waited "
                   f"on it (sympathetic): {waiting[:16]}{' …' if len(waiting) > 16 else ''}",
        )
