"""What every detector looks like, and the per-job topology book they share.

A detector is pure with respect to I/O: events (in event-time order) and the passage of time go
in, diagnoses come out. The engine feeds the same detectors from a live consumer group, from a
trace file, or from a unit test.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Protocol, runtime_checkable

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.topology import Topology, is_topology

log = logging.getLogger(__name__)


@runtime_checkable
class Detector(Protocol):
    def observe(self, event: Envelope) -> list[Diagnosis]:
        """One event, in event-time order per node. Returns the diagnoses it completes."""
        ...

    def tick(self, now: float) -> list[Diagnosis]:
        """Time has reached ``now`` (event time); detectors of absence (hangs, silence) fire here."""
        ...


@runtime_checkable
class DiagnosisListener(Protocol):
    def observe_diagnosis(self, diagnosis: Diagnosis) -> list[Diagnosis]:
        """Another detector's finding (e.g. a fail-slow suspicion that starts stack rounds)."""
        ...


class JobBook:
    """Every job's topology over time, from ``job``/``topology`` events.

    A job's machines change (an eviction brings a standby in), and a consumer may learn a later
    topology before it has judged the events that came before it (priming from the compacted
    ``jobs`` topic, a backlog). So the book keeps each version with its time, and answers for the
    job's current event time, which the engine sets with :meth:`advance`."""

    def __init__(self) -> None:
        self._versions: dict[str, list[tuple[float, Topology]]] = {}
        # Job → its event time (advance() sets it; the node stage sets it inline, a call a message
        # fewer: issue 56).
        self.now: dict[str, float] = {}
        # Job → its ranks' placement (rank → place), for a job of one topology only (its sole
        # placement, kept as update() learns): the node stage looks a step's rank up in it with no
        # call a step (issue 56: four in five messages are steps).
        self.placements: dict[str, Mapping[int, Any]] = {}

    def update(self, event: Envelope) -> Topology | None:
        """Record a topology event; raises InvalidEvent (a dead letter) when it is malformed."""
        if not is_topology(event):
            return None
        topology = Topology.from_data(event.data)
        versions = self._versions.setdefault(event.job, [])
        entry = (float(event.ts), topology)
        if entry[0] not in {ts for ts, _ in versions}:
            versions.append(entry)
            versions.sort(key=lambda v: v[0])
            if len(versions) == 1:
                self.placements[event.job] = topology.by_rank
            else:
                self.placements.pop(event.job, None)
        return topology

    def advance(self, job: str, now: float) -> None:
        """The job's event time has reached ``now``: topologies stamped up to then apply."""
        self.now[job] = now

    def times(self) -> Mapping[str, float]:
        """Each job's event time (as :meth:`advance` set it)."""
        return self.now

    def topology(self, job: str, at: float | None = None) -> Topology | None:
        """The topology in force at ``at`` (default: the job's current event time)."""
        versions = self._versions.get(job)
        if not versions:
            return None
        if len(versions) == 1:  # the one a job has until it restarts, whatever the time (asked per step)
            return versions[0][1]
        now = self.now.get(job) if at is None else at
        if now is None:
            return versions[-1][1]
        current = versions[0][1]  # before its first version the job's first topology applies
        for ts, topology in versions:
            if ts > now:
                break
            current = topology
        return current

    def sole_placement(self, job: str) -> Mapping[int, Any] | None:
        """The job's ranks' placement (rank → its place) where it has one topology, in force
        whatever the time (until a restart brings another); None otherwise (then ask
        :meth:`topology` at the event's time)."""
        return self.placements.get(job)

    def replaced_at(self, job: str, at: float) -> Topology | None:
        """The topology that a version stamped exactly ``at`` replaced, else None. At that instant
        both are in force: what the machines going out send as the change happens (their ranks
        acking the eviction) can be stamped the same second as the topology bringing the standby in."""
        versions = self._versions.get(job)
        if not versions:
            return None
        for i, (ts, _) in enumerate(versions):
            if ts == at:
                return versions[i - 1][1] if i else None
            if ts > at:
                break
        return None

    def jobs(self) -> list[str]:
        return list(self._versions)

    def rank_node(self, job: str, rank: int) -> str | None:
        topo = self.topology(job)
        if topo is None:
            return None
        place = topo.by_rank.get(rank)
        return place.node if place else None


__all__ = ["Detector", "DiagnosisListener", "JobBook", "InvalidEvent"]
