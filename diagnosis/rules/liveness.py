"""Liveness: a node whose heartbeats stop for longer than the grace period is silent → evict.

Job-level because "silent" needs the list of nodes that should be beating. A node is judged only
after it beat at least once (a job still starting is not silent), and when most of a job goes
quiet at once the stream itself stopped (job ended, agent pipeline down): nobody is blamed.

Agent down is not node down: the heartbeat comes from the node agent, the step telemetry from
the trainer itself. Beats gone while the node's ranks still report steps is an ``alert`` about
the agent; the node is called silent only once its steps have stopped too.
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

    def observe(self, event: Envelope) -> list[Finding]:
        if event.source == "train":
            if event.kind == "step":
                key = (event.job, event.node)
                self._steps[key] = max(self._steps.get(key, event.ts), event.ts)
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
            newest = max((t for (j, _), t in self._steps.items() if j == job), default=None)
            for node, beat in late:
                stepped = self._steps.get((job, node))
                # Its ranks keep pace with the rest of the job (a checkpoint pause stops everyone's
                # steps, not this node's alone), and kept stepping well after its beats stopped
                # (a node that died between a beat and a step report is not an agent that died).
                keeps_pace = stepped is not None and newest is not None and newest - stepped <= self.grace_s
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

    def forget(self, job: str, node: str) -> None:
        """The node left the job (evicted, restarted elsewhere): stop expecting its beats."""
        self._beats.get(job, {}).pop(node, None)
        self._steps.pop((job, node), None)
