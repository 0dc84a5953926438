"""Stack requests and record-only findings on top of the hand-worked history (tests/history/known.py).

A hang suspicion on j1 at T0+100 asks every rank for its stack (action capture_stacks, all four
nodes, low confidence), and a second stack round follows; n2 gets one more record-only finding.
None of these is a failure: failures, incidents, latencies and the plots must read as on known.py
alone (the request still marks the job stalled in the timeline: the sink derives that).
"""

from __future__ import annotations

from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from tests.history.known import NODES, T0

_DUMP = """Process 20011: python3 train.py --config gpt.yaml
Python v3.11.9 (/usr/bin/python3.11)

Thread 20011 (idle): "MainThread"
    all_gather_into_tensor (torch/distributed/distributed_c10d.py:3019)
    wrapper (torch/distributed/c10d_logger.py:83)
    _gather_along_first_dim (megatron/core/tensor_parallel/mappings.py:95)
    forward (megatron/core/tensor_parallel/mappings.py:210)
"""
# The answers to c3: one usable py-spy dump from n0, one failed capture from n1.
DUMPS = [
    Envelope(ts=T0 + 103, job="j1", node="n0", source="stack", kind="stack_dump", id="dump-n0",
             data={"rank": 0, "pid": 20011, "dump": _DUMP, "request_id": "c3", "tool": "py-spy"}),
    Envelope(ts=T0 + 104, job="j1", node="n1", source="stack", kind="stack_dump", id="dump-n1",
             data={"rank": 2, "pid": None, "dump": "py-spy: no training process found", "request_id": "c3",
                   "tool": "py-spy", "ok": False}),
]

REQUESTS = [
    Diagnosis(id="r1", job="j1", ts=T0 + 101, onset=T0 + 96, fault="job_hang", action="capture_stacks",
              nodes=tuple(NODES), confidence=0.3, detail="no step progress for 5s; capturing every rank's stack"),
    Diagnosis(id="r2", job="j1", ts=T0 + 111, onset=T0 + 96, fault="job_hang", action="capture_stacks",
              nodes=tuple(NODES), confidence=0.3, detail="stack round 2/5"),
]
RECORD_ONLY = Diagnosis(id="d6", job="j1", ts=T0 + 112, onset=T0 + 110, fault="gpu_memory", action="none",
                        nodes=("n2",), confidence=0.5, detail="Xid 63 <row remap pending> & retired page")
STACK_COMMAND = Command(id="c3", job="j1", action="capture_stacks", issued_at=T0 + 101.5, expires_at=T0 + 160,
                        nodes=tuple(NODES), reason="job_hang: capture the stacks of every rank", diagnosis_id="r1",
                        signature="sig3")


def records() -> list:
    return [*DUMPS, *REQUESTS, RECORD_ONLY, STACK_COMMAND]
