"""The weakest evictions of a hang, from outside: healthy machines a hang verdict once blamed for the
stacks they did not send, and the true cases it must still catch (docs/design.md §5).

Written from docs/events.md with the outside check's machines, beats and steps
(tests/outside/sre_shapes.py, job_shape.py): a 16 x 4 GPU Megatron job steps to t=300 s and hangs
with every rank in one all-to-all. Its agents answer every capture: the trace holds a set of py-spy
dumps every 30 s from t=380 on (each capture takes the first set after it was asked for), so
`faultlens analyze` sees the first capture and the second one the verdict asks for.

- ptrace_denied: machine 5's container lacks SYS_PTRACE, its agent sends no dump at all, its beats
  list its trainers: healthy, never evicted (an alert that names it, then another).
- dump_lost: machine 5's agent restarted while sending the first capture's dumps; the later ones
  arrive: healthy, never evicted.
- xid79: machine 5's GPU fell off the bus (its kernel log's Xid 79) as the job hung; its ranks send
  no dump: it is evicted, and nothing else.
- cuda_stuck: machine 5's ranks are stuck in a CUDA call, py-spy hangs on them (no dump), and the
  ProcessGroupNCCL watchdogs of every other rank fire in the next collective while theirs never do:
  evicted, and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.outside.job_shape import Job, Trace, machine_names
from tests.outside.modes import offline
from tests.outside.sre_machines import Steps, steps
from tests.outside.sre_shapes import _ALL_TO_ALL, _IDLE_HEAD, START, _plain
from tests.outside.write_traces import write_case

EVICTING = ("evict", "evict_reset_gpu")
HANG_AT, LENGTH = 300.0, 900.0
CULPRIT = 5  # the machine each case is about


def _job(name: str) -> Job:
    return Job(f"outside-{name}", machine_names(name, 16))


def _answers(trace: Trace, job: Job, silent: set[str], first_silent: set[str] = frozenset()) -> None:
    """A set of py-spy dumps every 30 s from t=380: every rank in the all-to-all, none from ``silent``
    nodes, and none from ``first_silent`` in the first set."""
    for k, at in enumerate(range(380, 800, 30)):
        for r in job.ranks:
            if r["node"] in silent or (k == 0 and r["node"] in first_silent):
                continue
            pid = 41_000 + 10 * job.nodes.index(r["node"]) + r["tp"]
            data = {
                "rank": r["rank"],
                "pid": pid,
                "tool": "py-spy",
                "ok": True,
                "rank_env": "RANK",
                "request_id": f"{job.name}-capture-{k}",
                "dump": (_IDLE_HEAD + _ALL_TO_ALL).format(pid=pid),
            }
            trace.emit(START + at + 0.05 * r["rank"], job.name, r["node"], "stack", "stack_dump", data)


def _hung(name: str) -> tuple[Trace, Job]:
    trace, job = Trace(seed=700), _job(name)
    _plain(trace, job, START, LENGTH)
    steps(trace, job, START, Steps(0.0, HANG_AT))
    return trace, job


def _diagnoses(tmp: Path, name: str, trace: Trace, fault: str | None = "job_hang") -> list[dict]:
    path = tmp / f"{name}.parquet"
    write_case(trace.rows(), path, [])
    return [d for d in offline(path) if fault is None or d["fault"] == fault]


@pytest.mark.long(3)
def test_a_machine_whose_pyspy_cannot_attach_is_named_but_never_evicted(tmp_path):
    trace, job = _hung("ptrace")
    _answers(trace, job, silent={job.nodes[CULPRIT]})
    hang = _diagnoses(tmp_path, "ptrace", trace)
    assert not [d for d in hang if d["action"] in EVICTING]
    alerts = [d for d in hang if d["action"] == "alert"]
    assert alerts and all(d["nodes"] == [job.nodes[CULPRIT]] for d in alerts)
    assert any(d["id"].endswith(".look2") for d in hang)  # the second capture was asked for


@pytest.mark.long(3)
def test_a_dump_lost_in_transit_evicts_nobody(tmp_path):
    trace, job = _hung("lost")
    _answers(trace, job, silent=set(), first_silent={job.nodes[CULPRIT]})
    hang = _diagnoses(tmp_path, "lost", trace)
    assert not [d for d in hang if d["action"] in EVICTING]


@pytest.mark.long(3)
def test_ranks_stuck_in_a_cuda_call_are_evicted_when_the_watchdog_names_them(tmp_path):
    trace, job = _hung("cuda")
    culprit = job.nodes[CULPRIT]
    _answers(trace, job, silent={culprit})
    for r in job.ranks:  # the watchdogs of every rank but the culprit's fire in the next collective
        if r["node"] != culprit:
            data = {
                "rank": r["rank"],
                "seq": 88_402,
                "last_enqueued": 88_402,
                "last_completed": 88_401,
                "op": "ALLTOALL_BASE",
                "timeout_ms": 60_000,
            }
            trace.emit(START + 362.0 + 0.01 * r["rank"], job.name, r["node"], "nccl", "nccl_timeout", data)
    hang = _diagnoses(tmp_path, "cuda", trace)
    evicted = {n for d in hang if d["action"] in EVICTING for n in d["nodes"]}
    assert evicted == {culprit}


@pytest.mark.long(3)
def test_a_gpu_that_fell_off_is_evicted_and_nothing_else(tmp_path):
    trace, job = _hung("xid")
    culprit = job.nodes[CULPRIT]
    _answers(trace, job, silent={culprit})
    trace.kernel_line(
        START + 298.0, job.name, culprit, "NVRM: Xid (PCI:0000:9b:00): 79, pid=41052, name=python3, GPU has fallen off the bus."
    )
    every = _diagnoses(tmp_path, "xid", trace, fault=None)
    assert {n for d in every if d["action"] in EVICTING for n in d["nodes"]} == {culprit}
