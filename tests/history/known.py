"""A small fault history whose report figures are worked out by hand (see the numbers in the tests).

Job j1 (nodes n0..n3), times relative to T0 = 2023-11-14 00:00:00 UTC:
  -10 topology (job start); steps every second 0..39
   20 gpu_memory on n0, detected 21, action none (recorded only, job keeps running)
   40 gpu_lost on n1: detected 43, evict n1 at 45, launcher restart at 50; steps again 60..79
   80 nccl_error on n2,n3: detected 90, evict n2,n3,n0 at 91 (n0 over-evicted); steps 95..119
Job j2 (next day, D = T0 + 86400): topology at D-10, steps D..D+29,
   gpu_thermal on n1 at D+10, detected D+16, no command (steps go on: a gray failure)
"""

from __future__ import annotations

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology

T0 = 1_699_920_000.0
D = T0 + 86_400
NODES = ["n0", "n1", "n2", "n3"]


def _steps(job: str, start: float, stop: float) -> list[Envelope]:
    return [Envelope(ts=start + i + 0.25, job=job, node="n0", source="train", kind="step", id=f"{job}-step-{start + i}",
                     data={"rank": 0, "step": i, "loss": 2.0, "step_time_s": 1.0})
            for i in range(int(stop - start) + 1)]


def _topology(job: str, ts: float) -> Envelope:
    return Topology.grid(NODES, 2, 2, 2, 2).to_event(job, ts, event_id=f"{job}-topology")


D1 = Diagnosis(id="d1", job="j1", ts=T0 + 43, onset=T0 + 40, fault="gpu_lost", action="evict", nodes=("n1",),
               confidence=1.0, detail="GPU fell off the bus")
D2 = Diagnosis(id="d2", job="j1", ts=T0 + 90, onset=T0 + 80, fault="nccl_error", action="evict", nodes=("n2", "n3"),
               ranks=(4, 6), group="pp:1", confidence=0.9, count=12)
D3 = Diagnosis(id="d3", job="j1", ts=T0 + 21, onset=T0 + 20, fault="gpu_memory", action="none", nodes=("n0",),
               confidence=0.5)
D4 = Diagnosis(id="d4", job="j2", ts=D + 16, onset=D + 10, fault="gpu_thermal", action="evict", nodes=("n1",),
               confidence=0.95)
C1 = Command(id="c1", job="j1", action="evict", issued_at=T0 + 45, expires_at=T0 + 345, nodes=("n1",),
             reason="gpu_lost", diagnosis_id="d1", signature="sig1")
C2 = Command(id="c2", job="j1", action="evict", issued_at=T0 + 91, expires_at=T0 + 391, nodes=("n2", "n3", "n0"),
             reason="nccl_error: evict pp:1", diagnosis_id="d2", signature="sig2")

LABELS = [
    {"job": "j1", "fault": "gpu_lost", "nodes": ["n1"], "ranks": [2, 3], "onset": T0 + 40},
    {"job": "j1", "fault": "nccl_error", "nodes": ["n2"], "ranks": [4], "onset": T0 + 80},
]


def events() -> list[Envelope]:
    out = [_topology("j1", T0 - 10)]
    out += _steps("j1", T0, T0 + 39) + _steps("j1", T0 + 60, T0 + 79) + _steps("j1", T0 + 95, T0 + 119)
    out.append(Envelope(ts=T0 + 40.5, job="j1", node="n1", source="kernel", kind="gpu_lost", id="k-lost",
                        data={"pci": "0000:3b:00.0", "fault": "gpu_lost", "action": "evict", "severity": "fatal",
                              "line": "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."}))
    out.append(Envelope(ts=T0 + 50, job="j1", node="-", source="job", kind="restart", id="restart-1",
                        data={"reason": "evict n1", "command_id": "c1", "nodes_out": ["n1"], "nodes_in": ["s0"]}))
    out += [_topology("j2", D - 10)] + _steps("j2", D, D + 29)
    return sorted(out, key=lambda e: e.ts)


def records() -> list:
    """Everything the sink stores, in arrival order (events, then decisions)."""
    return [*events(), D1, D2, D3, D4, C1, C2]
