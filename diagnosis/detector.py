"""What every detector looks like, and the per-job topology book they share.

A detector is pure with respect to I/O: events (in event-time order) and the passage of time go
in, diagnoses come out. The engine feeds the same detectors from a live consumer group, from a
trace file, or from a unit test.
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

from streams.diagnosis_record import Diagnosis
from streams.events import Envelope, InvalidEvent
from streams.topology import Topology

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
    """The latest topology of every job, from ``job``/``topology`` events."""

    def __init__(self) -> None:
        self._topologies: dict[str, Topology] = {}

    def update(self, event: Envelope) -> Topology | None:
        """Record a topology event; raises InvalidEvent (a dead letter) when it is malformed."""
        if event.source != "job" or event.kind != "topology":
            return None
        topology = Topology.from_data(event.data)
        self._topologies[event.job] = topology
        return topology

    def topology(self, job: str) -> Topology | None:
        return self._topologies.get(job)

    def jobs(self) -> list[str]:
        return list(self._topologies)

    def rank_node(self, job: str, rank: int) -> str | None:
        topo = self._topologies.get(job)
        if topo is None:
            return None
        place = topo.by_rank.get(rank)
        return place.node if place else None


__all__ = ["Detector", "DiagnosisListener", "JobBook", "InvalidEvent"]
