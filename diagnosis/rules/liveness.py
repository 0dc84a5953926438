"""Liveness: a node whose heartbeats stop for longer than the grace period is silent → evict.

Job-level because "silent" needs the list of nodes that should be beating. A node is judged only
after it beat at least once (a job still starting is not silent), and when most of a job goes
quiet at once the stream itself stopped (job ended, agent pipeline down): nobody is blamed.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnosis.detector import JobBook
from diagnosis.rules.base import Finding
from streams.events import Envelope

GRACE_S = 30.0
# More than this share of a job's nodes silent at once is the job ending, not nodes failing.
MAX_SILENT_SHARE = 0.25


@dataclass(slots=True)
class _Beat:
    ts: float
    id: str
    silent: bool = False


class SilenceDetector:
    sources = frozenset({"heartbeat"})

    def __init__(self, grace_s: float = GRACE_S, max_share: float = MAX_SILENT_SHARE,
                 book: JobBook | None = None) -> None:
        self.grace_s = grace_s
        self.max_share = max_share
        self.book = book
        self._beats: dict[str, dict[str, _Beat]] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind != "beat":
            return []
        nodes = self._beats.setdefault(event.job, {})
        prev = nodes.get(event.node)
        if prev is None or event.ts >= prev.ts:
            nodes[event.node] = _Beat(event.ts, event.id)
        return []

    def tick(self, now: float) -> list[Finding]:
        out: list[Finding] = []
        for job, nodes in self._beats.items():
            self._drop_departed(job, nodes)
            late = [(n, b) for n, b in nodes.items() if not b.silent and now - b.ts > self.grace_s]
            if not late:
                continue
            quiet = sum(1 for b in nodes.values() if now - b.ts > self.grace_s)
            if quiet > max(1, self.max_share * len(nodes)):
                continue  # the whole stream stopped; look again when beats return
            for node, beat in late:
                beat.silent = True
                out.append(Finding(
                    job=job, ts=now, onset=beat.ts, fault="node_silent", action="evict", nodes=(node,),
                    entity="heartbeat", evidence=(beat.id,),
                    detail=f"no heartbeat from {node} for {now - beat.ts:.0f}s (grace {self.grace_s:.0f}s)",
                ))
        return out

    def _drop_departed(self, job: str, nodes: dict[str, _Beat]) -> None:
        """A node the job's current topology no longer lists was swapped out: its last beats may
        arrive after the restart event (another topic, no order between them), and it must not
        then be called silent."""
        topology = self.book.topology(job) if self.book is not None else None
        if topology is None:
            return
        for node in [n for n in nodes if n not in topology.ranks_by_node]:
            del nodes[node]

    def forget(self, job: str, node: str) -> None:
        """The node left the job (evicted, restarted elsewhere): stop expecting its beats."""
        self._beats.get(job, {}).pop(node, None)
