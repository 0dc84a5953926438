"""A simulated run with the engine in the loop: the simulated agents answer the engine's requests.

A trace recorded from a live cluster holds stack dumps only where the diagnosis engine asked for
them (``capture_stacks``), timed by its asking, and none from nodes where capture fails. This
drives a :class:`simulator.run.SimRun` second by second, feeds its events to an
:class:`diagnosis.engine.core.Engine`, and turns each ``capture_stacks`` diagnosis into the command the
remediation side would send, which the simulated agents answer. Lives here, above both the
simulator and diagnosis, because the simulator must not look at the detectors.
"""

from __future__ import annotations

import logging
from typing import Iterator

from faultlens.diagnosis.engine.core import Engine
from faultlens.events.command import Command, CommandAction
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.simulator.run import SimRun

log = logging.getLogger(__name__)

CHUNK_S = 1.0  # how quickly a request is answered (an agent runs py-spy within a second or two)
COMMAND_TTL_S = 60.0


class ClosedLoop:
    """Iterate :meth:`events` once; ``diagnoses`` then holds the in-loop engine's final diagnoses by id."""

    def __init__(self, run: SimRun, engine: Engine | None = None, chunk_s: float = CHUNK_S):
        self.run = run
        self.engine = engine or Engine()
        self.chunk_s = chunk_s
        self.diagnoses: dict[str, Diagnosis] = {}
        self.requests = 0

    def _respond(self, batch: list[Envelope]) -> list[Command]:
        out: list[Command] = []
        for event in batch:
            try:
                found = self.engine.process(event)
            except InvalidEvent:
                self.engine.stats["dead_letters"] += 1
                continue
            for d in found:
                self.diagnoses[d.id] = d
                if d.action == "capture_stacks":
                    self.requests += 1
                    # The id follows from the diagnosis: the same run gives the same trace, byte for byte.
                    out.append(Command(job=d.job, action=CommandAction.CAPTURE_STACKS, issued_at=d.ts, expires_at=d.ts + COMMAND_TTL_S,
                                       nodes=d.nodes, reason=d.detail[:200], diagnosis_id=d.id, id=f"cap-{d.id}"))
        return out

    def events(self, progress=None) -> Iterator[Envelope]:
        yield from self.run.events(chunk_s=self.chunk_s, progress=progress, respond=self._respond)
        for d in self.engine.flush():
            self.diagnoses[d.id] = d
