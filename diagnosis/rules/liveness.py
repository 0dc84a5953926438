"""Liveness: a node whose heartbeats stop for longer than the grace period is silent → evict.

Job-level because "silent" needs the list of nodes that should be beating. A node is judged only
after it beat at least once (a job still starting is not silent), and when most of a job goes
quiet at once the stream itself stopped (job ended, agent pipeline down): nobody is blamed.

Agent down is not node down: the heartbeat comes from the node agent, the step telemetry from
the trainer itself. Beats gone while the node's ranks still report steps is an ``alert`` about
the agent; the node is called silent only once its steps have stopped too.

"Still report steps" is judged against the job's typical node, never its most advanced one, and
by step number where steps carry one: after a checkpoint pause longer than the grace period, the
first node to report its next step is 40 s ahead of every node not yet heard from, and which one
comes first in a batch depends on how the stream was read (found: a split node/job stage read as
a backlog evicted a healthy node whose agent had died, tests/fixtures/foreign/dead_agent.jsonl).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from diagnosis.detector import JobBook
from diagnosis.rules.base import Finding, opt_int
from streams.events import Envelope

GRACE_S = 30.0
# More than this share of a job's nodes silent at once is the job ending, not nodes failing.
MAX_SILENT_SHARE = 0.25
# A node's ranks keep pace while their last reported step is at most this many steps behind the
# job's median node (pipeline stages finish a step at different times).
MAX_STEP_LAG = 2


@dataclass(slots=True)
class _Beat:
    ts: float
    id: str
    silent: bool = False
    agent_alerted: bool = False


class SilenceDetector:
    sources = frozenset({"heartbeat", "train"})

    def __init__(self, grace_s: float = GRACE_S, max_share: float = MAX_SILENT_SHARE,
                 book: JobBook | None = None) -> None:
        self.grace_s = grace_s
        self.max_share = max_share
        self.book = book
        self._beats: dict[str, dict[str, _Beat]] = {}
        self._steps: dict[tuple[str, str], float] = {}  # (job, node) → last step report
        self._step_no: dict[tuple[str, str], int] = {}  # (job, node) → step number of that report

    def observe(self, event: Envelope) -> list[Finding]:
        if event.source == "train":
            if event.kind == "step":
                key = (event.job, event.node)
                if event.ts >= self._steps.get(key, event.ts):
                    self._steps[key] = event.ts
                    number = opt_int(event.data, "step")
                    if number is None:
                        self._step_no.pop(key, None)
                    else:  # the latest report's number (a rollback lowers it on every node)
                        self._step_no[key] = number
            return []
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
            pace = self._pace(job)
            for node, beat in late:
                stepped = self._steps.get((job, node))
                # Its ranks keep pace with the rest of the job (a checkpoint pause stops everyone's
                # steps, not this node's alone), and kept stepping well after its beats stopped
                # (a node that died between a beat and a step report is not an agent that died).
                keeps_pace = stepped is not None and self._keeps_pace(job, node, stepped, pace)
                if keeps_pace and (beat.agent_alerted or stepped >= beat.ts + self.grace_s / 2):
                    if not beat.agent_alerted:
                        beat.agent_alerted = True
                        out.append(Finding(
                            job=job, ts=now, onset=beat.ts, fault="node_silent", action="alert", nodes=(node,),
                            entity="agent", evidence=(beat.id,),
                            detail=f"no heartbeat from {node} for {now - beat.ts:.0f}s but its ranks reported a step "
                                   f"{now - stepped:.0f}s ago: the node agent is down, not the node (alert, no eviction)",
                        ))
                    continue
                beat.silent = True
                out.append(Finding(
                    job=job, ts=now, onset=beat.ts, fault="node_silent", action="evict", nodes=(node,),
                    entity="heartbeat", evidence=(beat.id,),
                    detail=f"no heartbeat from {node} for {now - beat.ts:.0f}s (grace {self.grace_s:.0f}s)",
                ))
        return out

    def _pace(self, job: str) -> tuple[float | None, float | None]:
        """The job's typical node: the median of its nodes' last step times and step numbers."""
        times = [t for (j, _), t in self._steps.items() if j == job]
        numbers = [n for (j, _), n in self._step_no.items() if j == job]
        return (statistics.median(times) if times else None, statistics.median(numbers) if numbers else None)

    def _keeps_pace(self, job: str, node: str, stepped: float, pace: tuple[float | None, float | None]) -> bool:
        typical_ts, typical_no = pace
        number = self._step_no.get((job, node))
        if number is not None and typical_no is not None:
            return typical_no - number <= MAX_STEP_LAG
        return typical_ts is not None and typical_ts - stepped <= self.grace_s

    def _drop_departed(self, job: str, nodes: dict[str, _Beat]) -> None:
        """A node the job's current topology no longer lists was swapped out: its last beats may
        arrive after the restart event (another topic, no order between them), and it must not
        then be called silent."""
        topology = self.book.topology(job) if self.book is not None else None
        if topology is None:
            return
        for node in [n for n in nodes if n not in topology.ranks_by_node]:
            del nodes[node]
            self._steps.pop((job, node), None)
            self._step_no.pop((job, node), None)

    def forget(self, job: str, node: str) -> None:
        """The node left the job (evicted, restarted elsewhere): stop expecting its beats."""
        self._beats.get(job, {}).pop(node, None)
        self._steps.pop((job, node), None)
        self._step_no.pop((job, node), None)
