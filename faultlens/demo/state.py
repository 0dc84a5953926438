"""What the demo has seen so far: diagnoses, decisions, commands obeyed or refused, trainer events.

Written by the consumer threads, the driver and the trainer reader; read by the view and the
report. One lock; every reader takes a snapshot.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis

RECENT = 12  # rows of incidents / commands the view shows


@dataclass
class CommandRecord:
    command: Command | None
    accepted: bool
    reason: str
    wall: float
    sim_ts: float | None = None  # simulated time the cluster obeyed it at


@dataclass
class DemoState:
    sim_job: str
    trainer_job: str | None = None
    slots: list[str] = field(default_factory=list)  # slot index → machine now in it
    suspects: set[str] = field(default_factory=set)
    evicted: list[str] = field(default_factory=list)
    diagnoses: list[Diagnosis] = field(default_factory=list)
    decisions: list[Any] = field(default_factory=list)
    commands: list[CommandRecord] = field(default_factory=list)
    sim_now: float = 0.0
    sim_start: float = 0.0
    sim_end: float = 0.0
    published: int = 0
    lockstep_timeouts: int = 0  # --speed 0 slices after which the pipeline had not caught up in 5 s
    launcher_restarts: int = 0  # the simulated launcher restarted a crashed job with no command
    started_wall: float = field(default_factory=time.time)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def on_diagnosis(self, d: Diagnosis) -> None:
        with self.lock:
            self.diagnoses.append(d)
            # Low-confidence requests for evidence (stacks of every rank) name everyone: not suspects.
            if d.job == self.sim_job and d.action != "none" and d.confidence >= 0.5:
                self.suspects.update(n for n in d.nodes if n in self.slots)

    def on_decision(self, decision: Any) -> None:
        with self.lock:
            self.decisions.append(decision)

    def on_command(self, record: CommandRecord) -> None:
        with self.lock:
            self.commands.append(record)

    def on_restarted(self) -> None:
        """The job restarted on a command: what was suspected before is settled."""
        with self.lock:
            self.suspects.clear()

    def on_evicted(self, nodes: list[str], slots: list[str]) -> None:
        with self.lock:
            self.evicted.extend(nodes)
            self.suspects.difference_update(nodes)
            self.slots = list(slots)

    def node_states(self) -> list[tuple[str, str]]:
        """(machine, state) per slot: healthy, suspect or replaced (a spare took the slot)."""
        with self.lock:
            out = []
            for name in self.slots:
                if name in self.suspects:
                    out.append((name, "suspect"))
                elif not name.startswith("n"):
                    out.append((name, "replaced"))
                else:
                    out.append((name, "healthy"))
            return out

    def recent(self) -> tuple[list[Diagnosis], list[CommandRecord]]:
        with self.lock:
            shown = [d for d in self.diagnoses if d.action != "none"]
            return shown[-RECENT:], self.commands[-RECENT:]
