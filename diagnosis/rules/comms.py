"""Collective-communication failures: blame the FIRST failing rank, not every rank that timed out.

When one rank dies or stalls, every peer in its communicators hits the NCCL watchdog a little
later: the timeouts are sympathetic. This job-level detector gathers a job's NCCL errors and
watchdog timeouts for ``collect_s`` after the first one, then names one culprit: the earliest
hard NCCL error if any rank reported one, else the rank stuck at the lowest collective sequence
number (it fell behind first), ties broken by the earliest report. The incident's onset is when
the stuck collective began (report time minus the watchdog's elapsed time), not when it fired. A hard error opening an
incident is decided at once (events arrive in time order, so it is the earliest); what follows
within ``collect_s`` is folded into it as sympathetic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.rules.base import Finding, line_of, parsed_fault
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import NcclError, NcclTimeout
from faultlens.events.payloads_log import SchedulerLine

log = logging.getLogger(__name__)

COLLECT_S = 30.0
# After a decision, NCCL reports keep coming for a while (every watchdog fires after its own
# timeout): until the job restarts, or this long, they are echoes of the decided incident.
ECHO_S = 300.0


@dataclass(frozen=True, slots=True)
class _Report:
    ts: float
    rank: int | None
    node: str
    progress: int | None  # the last collective this rank completed
    started: float  # when the collective it is stuck in began (ts minus the elapsed time)
    hard: bool
    id: str
    text: str
    # NCCL's misuse results (ncclInvalidUsage, ncclInvalidArgument, a duplicate GPU) are the program's:
    # the parser says user_code (docs/design.md §9), and the incident keeps that class and a rollback.
    fault: str = "nccl_error"


@dataclass(slots=True)
class _Incident:
    first_ts: float
    reports: list[_Report] = field(default_factory=list)


def _wordless_death(event: Envelope) -> _Report | None:
    """A worker that died with no error of its own (os._exit), as `faultlens run` reports it
    (``wordless``, trainer_hooks/worker_exits.py): a hard report, first of its incident, so the
    peers' "connection reset by peer" that follows is its echo, not the culprit."""
    line = typed(event, SchedulerLine)
    # data: `wordless` is the launcher's mark on a catalogue kind (no Struct field)
    if event.data.get("wordless") is not True or line.rank is None:
        return None
    return _Report(event.ts, line.rank, event.node, None, event.ts, True, event.id,
                   f"its worker exited with code {line.exitcode} and no error of its own")


class FirstFailingRank:
    """Job-level: needs every rank's reports (and the topology to place ranks on nodes)."""

    sources = frozenset({"nccl"})

    def __init__(self, book: JobBook, collect_s: float = COLLECT_S) -> None:
        self.book = book
        self.collect_s = collect_s
        self._open: dict[str, _Incident] = {}
        self._decided: dict[str, _Incident] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind not in ("nccl_timeout", "nccl_error", "worker_failed"):
            return []
        if event.kind == "worker_failed":
            report = _wordless_death(event)
            if report is None:
                return []
        elif event.kind == "nccl_timeout":
            timeout = typed(event, NcclTimeout)
            progress = timeout.last_completed
            if progress is None and timeout.seq is not None:
                progress = timeout.seq - 1  # the collective that timed out: the one before it completed
            # Whole milliseconds, the elapsed time where the watchdog gave one (a 0 falls back too).
            waited_ms = int(timeout.elapsed_ms or 0) or int(timeout.timeout_ms or 0)
            report = _Report(event.ts, timeout.rank, event.node, progress, event.ts - waited_ms / 1000.0, False,
                             event.id, str(timeout.op or line_of(event)))
        else:
            # A hard error names no collective (the parsers write only its rank and error text).
            error = typed(event, NcclError)
            fault = "user_code" if parsed_fault(event, "nccl_error", "reattempt")[0] == "user_code" else "nccl_error"
            report = _Report(event.ts, error.rank, event.node, None, event.ts, True, event.id,
                             str(error.error or line_of(event)), fault)
        decided = self._decided.get(event.job)
        if decided is not None and event.ts - decided.first_ts < ECHO_S:
            return []  # the incident is decided; later reports only waited on the culprit
        incident = self._open.setdefault(event.job, _Incident(event.ts))
        incident.reports.append(report)
        if report.hard and len(incident.reports) == 1:
            found = self._decide(event.job, self._open.pop(event.job), event.ts)  # a hard error always names its rank
            return [found] if found is not None else []
        return []

    def tick(self, now: float) -> list[Finding]:
        done = [job for job, inc in self._open.items() if now - inc.first_ts >= self.collect_s]
        return [f for f in (self._decide(job, self._open.pop(job), now) for job in done) if f is not None]

    def flush(self) -> list[Finding]:
        out = []
        for job in list(self._open):
            inc = self._open.pop(job)
            f = self._decide(job, inc, max(r.ts for r in inc.reports))
            if f is not None:
                out.append(f)
        return out

    def restarted(self, job: str) -> None:
        """A restart ends the incident: NCCL errors after it are news."""
        self._decided.pop(job, None)

    def _decide(self, job: str, inc: _Incident, now: float) -> Finding | None:
        self._decided[job] = inc
        hard = [r for r in inc.reports if r.hard]
        fault, action = "nccl_error", "reattempt"
        if hard:
            culprit = min(hard, key=lambda r: r.ts)
            why = f"earliest hard NCCL error ({culprit.text})"
            if culprit.fault == "user_code":
                fault, action = "user_code", "rollback"
                why = f"NCCL says the program used it wrongly ({culprit.text})"
        else:
            culprit = min(inc.reports, key=lambda r: (r.progress if r.progress is not None else 1 << 62, r.ts))
            tied = {r.node for r in inc.reports if r.progress == culprit.progress}
            if len(tied) > 1 and len(tied) * 2 > len({r.node for r in inc.reports}):
                # Everyone stopped at the same collective: nobody fell behind first. That is a hang
                # (the stack-based hang detector localises it), not a rank to blame here.
                log.info("job %s: %d NCCL timeouts, all at SeqNum %s on %d nodes: no first failing rank",
                         job, len(inc.reports), culprit.progress, len(tied))
                return None
            why = f"lowest last completed collective SeqNum {culprit.progress} ({culprit.text})"
        node = culprit.node
        if culprit.rank is not None:
            node = self.book.rank_node(job, culprit.rank) or node
        waiting = sorted({r.rank for r in inc.reports if r.rank is not None and r.rank != culprit.rank})
        return Finding(
            job=job, ts=now, onset=min(r.started for r in inc.reports), fault=fault, action=action,
            nodes=(node,), ranks=(culprit.rank,) if culprit.rank is not None else (), entity="nccl",
            evidence=tuple(r.id for r in sorted(inc.reports, key=lambda r: r.ts))[:32],
            detail=f"first failing rank {culprit.rank} on {node}: {why}; {len(waiting)} other rank(s) only waited "
                   f"on it (sympathetic): {waiting[:16]}{' …' if len(waiting) > 16 else ''}",
        )
