"""Nodes quiet together (diagnosis.rules.liveness): several of a job's nodes that stopped beating
within a grace period of each other, a telemetry partition whose every node of the job went quiet,
or the whole job: one alert (or a record) naming them, never evictions. :class:`QuietTogether` is a
base of :class:`~diagnosis.rules.liveness.SilenceDetector` (it uses its settings and state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from faultlens.diagnosis.rules.base import Finding


@dataclass(slots=True)
class Beat:
    ts: float
    id: str
    silent: bool = False
    agent_alerted: bool = False
    group_alerted: bool = False
    working: bool | None = None  # its pids listed a training process; None: the beat lists no pids
    stopping: bool = False  # the agent's last word on a deliberate stop


class QuietTogether:
    """The silence detector's alerts on nodes quiet together."""

    # The silence detector's, set in its __init__.
    grace_s: float
    partition_of: Callable[[str], int] | None
    _job_quiet: dict[str, tuple[float, bool]]

    def _ended(self, job: str, node: str, beat: Beat) -> bool:
        raise NotImplementedError  # the silence detector's: the agent said the job's work on it was over

    def _group_alert(
        self, job: str, together: list[str], quiet: dict[str, Beat], at: dict[str, float], size: int, now: float
    ) -> Finding:
        beats = [quiet[n] for n in together]
        for b in beats:
            b.group_alerted = True
        first = min(at[n] for n in together)
        shown = ", ".join(together[:12]) + (f" and {len(together) - 12} more" if len(together) > 12 else "")
        return Finding(
            job=job,
            ts=now,
            onset=first,
            fault="node_silent",
            action="alert",
            nodes=tuple(together),
            entity="group",
            evidence=tuple(b.id for b in beats[:16]),
            detail=f"{len(together)} of the job's {size} nodes stopped beating together ({shown}; the first "
            f"{now - first:.0f}s ago) while the others report on: one cause upstream of them (a rack, a "
            f"switch, a telemetry partition or its node-stage member), not {len(together)} machines "
            f"failing at once (alert, no eviction)",
        )

    def _quiet_partition_mates(self, node: str, beat_at: float, nodes: dict[str, Beat], heard: dict[str, float]) -> list[str]:
        """The node's telemetry partition mates, when that partition went quiet with it (every mate
        that reported around its last beat stopped within a grace period of it); none when there is
        no such evidence, or the partition carried a report past its silence (its own steps, or a
        mate's). Asked only once no fellow is undecided (_fellows_undecided): a mate that has not
        reported past the mark has been quiet for the grace period too."""
        if self.partition_of is None:
            return []
        mark = beat_at + self.grace_s
        if heard[node] >= mark:
            return []
        part = self.partition_of(node)
        mates = [
            m
            for m in nodes
            if m != node and not nodes[m].silent and heard[m] >= beat_at - self.grace_s and self.partition_of(m) == part
        ]
        if not mates or any(heard[m] >= mark for m in mates):
            return []
        return sorted(mates)

    def _partition_alert(
        self, job: str, node: str, mates: list[str], nodes: dict[str, Beat], heard: dict[str, float], now: float
    ) -> Finding:
        named = sorted([node, *mates])
        for n in named:
            nodes[n].group_alerted = True
        first, last = min(heard[n] for n in named), max(heard[n] for n in named)
        part = self.partition_of(node) if self.partition_of is not None else None
        return Finding(
            job=job,
            ts=now,
            onset=first,
            fault="node_silent",
            action="alert",
            nodes=tuple(named),
            entity="partition",
            evidence=tuple(nodes[n].id for n in named[:16]),
            detail=f"{', '.join(named[:12])}{' and more' if len(named) > 12 else ''}: every node of the job on "
            f"telemetry partition {part} stopped reporting within {last - first:.0f}s of each other "
            f"({now - first:.0f}s ago) and none of that partition reported since, while the job's other "
            f"nodes report on: the partition or its path to diagnosis stopped, not {len(named)} machines "
            f"(alert, no eviction)",
        )

    def _whole_job_quiet(
        self, job: str, nodes: dict[str, Beat], heard: dict[str, float], latest: float, now: float, stream_stopped: bool
    ) -> list[Finding]:
        """One alert per quiet spell of the whole job (a new one only after it reported again), or
        one record where nothing on its clock arrived either; then an alert if jobs on its clock
        report on without it."""
        said = self._job_quiet.get(job)
        if said is not None and said[0] == latest and (stream_stopped or not said[1]):
            return []
        self._job_quiet[job] = (latest, stream_stopped)
        # The nodes that were still reporting (one found silent before is not part of this stop)
        stopped = [t for n, t in heard.items() if not nodes[n].silent] or list(heard.values())
        node = max(heard, key=heard.__getitem__)
        entity = "job"
        if all(self._ended(job, n, b) for n, b in nodes.items()):
            action, detail = (
                "none",
                (
                    f"the job ended: every one of its {len(nodes)} node agents said its training processes had exited "
                    f"(or that it was stopping) before it went quiet, the last {now - latest:.0f}s ago (recorded, no alert)"
                ),
            )
        elif stream_stopped:
            # Live, the end of a replay reads exactly so, and offline the end of a trace judges no
            # absence: an alert here was the one verdict a live run gave that `analyze` did not. Its
            # own entity: dedup folds by entity, and the job's own silence, found once jobs on its
            # clock report on without it, must not fold into this record.
            entity, action, detail = (
                "stream",
                "none",
                (
                    f"no node of the job reported for {now - latest:.0f}s (the {len(stopped)} still reporting stopped "
                    f"within {latest - min(stopped):.0f}s of each other), and no job on its clock reported meanwhile: "
                    f"the stream stopped (its input ended, or the pipeline upstream of diagnosis stopped), the "
                    f"pipeline's silence, not a machine's (recorded, no alert)"
                ),
            )
        else:
            action, detail = (
                "alert",
                (
                    f"no node of the job reported for {now - latest:.0f}s (the {len(stopped)} still reporting stopped "
                    f"within {latest - min(stopped):.0f}s of each other): the job ended, or its telemetry stopped before "
                    f"reaching diagnosis; no node is judged silent on its own (alert, no eviction)"
                ),
            )
        return [
            Finding(
                job=job,
                ts=now,
                onset=latest,
                fault="telemetry_lost",
                action=action,
                nodes=(),
                entity=entity,
                evidence=(nodes[node].id,),
                detail=detail,
            )
        ]
