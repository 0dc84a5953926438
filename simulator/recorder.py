"""torch's Flight Recorder dump for a simulated rank, as the trainer hook sends it on ``capture_stacks``.

A real trainer with the hook answers a capture with its stacks and the JSON of torch's NCCL
recorder (``_dump_nccl_trace_json``), size-bounded by events.flight_recorder. This module writes
that JSON for a simulated Megatron-style rank (TP inside a node, PP stages, DP replicas) in the
layout torch 2.11 + NCCL gave on a real H100 (tests/fixtures/real_gpu/gpu40/fr_nccl.json):
``version``, ``comm_lib_version``, ``pg_config`` (group name → ``ranks`` as a string), ``pg_status``
(local pg id → last enqueued / started / completed numbers, as strings) and ``entries``.

Every rank runs the same schedule per step (:func:`step_ops`): per micro-batch a forward and a
backward, each a TP all_gather then reduce_scatter with the pipeline's send/recv around them,
then the DP gradient all_reduce in buckets. Groups are created in one order on every rank (the
default group "0", then every TP, PP and DP group), so a group's name is the same on all its
members and ``collective_seq_id`` counts the same collectives on each. Where a rank is in its
schedule comes from its stack state (simulator.stacks), so the dump and the stacks agree: a rank
in ``grad_sync`` holds the step's first DP all_reduce in flight; one in ``all_gather`` the step's
first TP all_gather; ``data_wait`` (a hang's culprit) entered neither, which is what its group
peers wait on; ``compute`` (a fail-slow rank) finished the all_gather and is behind everyone's
all_reduce. Completed collectives finish when their group's slowest member has entered them, so
a slow rank's peers show long ``duration_ms`` and late completions.

Pure: a topology, a rank's place in the schedule and the clock in, the JSON text out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from faultlens.events.topology import AXES, Topology

MICRO_BATCHES = 2
DP_BUCKETS = 2
VERSION = "2.10"  # the recorder format of torch 2.11 (real_gpu/gpu40)
NCCL_VERSION = "2.21.5"
TIMEOUT_MS = 60_000
HIDDEN = 4096


@dataclass(frozen=True, slots=True)
class Op:
    axis: str  # the group it runs on: tp, pp (p2p only) or dp
    name: str  # profiling name after "nccl:"
    frac: float  # where in the step it is entered, at nominal speed (0 = the step's start)
    p2p: bool = False
    sizes: tuple[tuple[int, ...], ...] = ((HIDDEN, HIDDEN),)
    out_sizes: tuple[tuple[int, ...], ...] = ((HIDDEN, HIDDEN),)


def step_ops(stage: int, stages: int, tp: int) -> tuple[Op, ...]:
    """One rank's collectives and p2p ops in one step, in the order it enters them."""
    ops: list[Op] = []
    gather = ((HIDDEN // max(1, tp), HIDDEN),)
    full = ((HIDDEN, HIDDEN),)
    span = 0.8 / (2 * MICRO_BATCHES)  # forward and backward share 80 % of the step; grad sync the rest
    for mb in range(MICRO_BATCHES):
        t = mb * span
        if stage > 0:
            ops.append(Op("pp", "recv", t, p2p=True, sizes=full, out_sizes=full))
        ops.append(Op("tp", "_allgather_base", t + 0.1 * span, sizes=gather, out_sizes=full))
        ops.append(Op("tp", "_reduce_scatter_base", t + 0.8 * span, sizes=full, out_sizes=gather))
        if stage < stages - 1:
            ops.append(Op("pp", "send", t + 0.9 * span, p2p=True, sizes=full, out_sizes=full))
    for mb in range(MICRO_BATCHES):
        t = (MICRO_BATCHES + mb) * span
        if stage < stages - 1:
            ops.append(Op("pp", "recv", t, p2p=True, sizes=full, out_sizes=full))
        ops.append(Op("tp", "_allgather_base", t + 0.1 * span, sizes=gather, out_sizes=full))
        ops.append(Op("tp", "_reduce_scatter_base", t + 0.8 * span, sizes=full, out_sizes=gather))
        if stage > 0:
            ops.append(Op("pp", "send", t + 0.9 * span, p2p=True, sizes=full, out_sizes=full))
    bucket = ((HIDDEN * HIDDEN // DP_BUCKETS,),)
    for b in range(DP_BUCKETS):
        ops.append(Op("dp", "allreduce", 0.82 + 0.08 * b, sizes=bucket, out_sizes=bucket))
    return tuple(ops)


def position(state: str, ops: tuple[Op, ...]) -> tuple[int, bool]:
    """(ops of the current step entered, whether the last of them is still in flight) for a stack state."""
    first_tp = next(i for i, o in enumerate(ops) if o.axis == "tp")
    if state == "data_wait":  # blocked on the host before the step's first TP collective
        return first_tp, False
    if state == "all_gather":
        return first_tp + 1, True
    if state == "compute":  # between the first all_gather and its reduce_scatter
        return first_tp + 1, False
    if state in ("irecv", "isend"):
        name = "recv" if state == "irecv" else "send"
        at = next((i for i, o in enumerate(ops) if o.p2p and o.name == name), None)
        return (first_tp, False) if at is None else (at + 1, True)
    if state == "grad_sync":
        return next(i for i, o in enumerate(ops) if o.axis == "dp") + 1, True
    raise ValueError(f"unknown stack state {state!r}")


def group_names(topology: Topology) -> dict[tuple[str, int], str]:
    """(axis, group id) → the group's name: "0" is the default group, then TP, PP and DP groups in
    creation order, the same on every rank (torch names groups by the order they are created)."""
    out: dict[tuple[str, int], str] = {}
    n = 1
    for axis in AXES:
        for gid in topology.groups(axis):
            out[(axis, gid)] = str(n)
            n += 1
    return out


@dataclass(frozen=True)
class Clock:
    """When the current step began and how long steps take; ``factors``: rank → compute slowdown."""

    step_start: float
    step_s: float
    steps_done: int  # steps this process completed before the current one
    factors: Mapping[int, float]


def dump_json(topology: Topology, rank: int, states: Mapping[int, str], clock: Clock, buffer: int,
              names: Mapping[tuple[str, int], str] | None = None) -> str:
    """The recorder's JSON for ``rank``: its last ``buffer`` entries, oldest first."""
    names = names or group_names(topology)
    place = topology.by_rank[rank]
    ops = step_ops(place.pp, topology.pp, topology.tp)
    done, in_flight = position(states[rank], ops)
    mine = {axis: topology.group_id(rank, axis) for axis in AXES}
    local = {axis: i + 1 for i, axis in enumerate(AXES)}  # pg_id: 0 the default group, then creation order
    members = {axis: topology.group_ranks(axis, mine[axis]) for axis in AXES}
    per_step = {axis: sum(1 for o in ops if o.axis == axis and not o.p2p) for axis in AXES}
    p2p_per_step = sum(1 for o in ops if o.p2p)

    # The newest entries are built, newest first, until the buffer is full: a long run's history
    # is never walked, only the steps the ring buffer still holds.
    ids = clock.steps_done * len(ops) + done  # entries this process recorded (after the init barrier)
    first = max(0, ids - buffer)
    entries = []
    for record in range(first, ids):
        step, i = divmod(record, len(ops))
        op = ops[i]
        k = step - clock.steps_done  # 0: the current step, -1 the one before
        start = clock.step_start + k * clock.step_s
        if op.p2p:
            seq, p2p = _count(ops, i, op.axis, per_step, step, collectives=True), _p2p_count(ops, i, p2p_per_step, step)
        else:
            seq, p2p = _count(ops, i, op.axis, per_step, step, collectives=True), 0
        flying = in_flight and record == ids - 1
        created = start + op.frac * clock.step_s * clock.factors.get(rank, 1.0)
        # A collective completes once its slowest member entered it (p2p: the slower of the pair).
        slowest = max(clock.factors.get(r, 1.0) for r in members[op.axis]) if not op.p2p else clock.factors.get(rank, 1.0)
        completed = start + op.frac * clock.step_s * slowest + 0.002
        entries.append(_entry(record + 1, seq, p2p, names[(op.axis, mine[op.axis])], local[op.axis], op,
                              created, None if flying else completed))
    status = {"0": _status(1, 1)}
    for axis in AXES:
        entered = _count(ops, done - 1, axis, per_step, clock.steps_done, collectives=True) if done else \
            clock.steps_done * per_step[axis]
        last_done = entered - (1 if in_flight and not ops[done - 1].p2p and ops[done - 1].axis == axis else 0)
        status[str(local[axis])] = _status(entered, last_done)
    config = {"0": {"name": "0", "desc": "", "ranks": json.dumps(sorted(topology.by_rank))}}
    for axis in AXES:
        config[names[(axis, mine[axis])]] = {"name": names[(axis, mine[axis])], "desc": "",
                                             "ranks": json.dumps(list(members[axis]))}
    return json.dumps({"version": VERSION, "comm_lib_version": NCCL_VERSION, "pg_config": config,
                       "pg_status": status, "nccl_comm_state": {}, "entries": entries}, separators=(",", ":"))


def _count(ops: tuple[Op, ...], i: int, axis: str, per_step: Mapping[str, int], step: int,
           collectives: bool) -> int:
    """``collective_seq_id`` of the group ``axis`` after op ``i`` of ``step``: collectives so far (p2p
    leaves it where it was). The default group's init barrier is its #1; the others start at 0."""
    return step * per_step[axis] + sum(1 for o in ops[: i + 1] if o.axis == axis and not o.p2p)


def _p2p_count(ops: tuple[Op, ...], i: int, per_step: int, step: int) -> int:
    return step * per_step + sum(1 for o in ops[: i + 1] if o.p2p)


def _status(entered: int, completed: int) -> dict[str, str]:
    # The NCCL recorder's JSON gives these numbers as strings (real_gpu/gpu40/fr_nccl.json).
    return {"last_enqueued_collective": str(entered), "last_started_collective": str(entered),
            "last_completed_collective": str(completed)}


def _entry(record: int, seq: int, p2p_seq: int, pg: str, pg_id: int, op: Op, created: float,
           completed: float | None) -> dict:
    ns = int(created * 1e9)
    return {
        "collective_seq_id": seq, "duration_ms": None if completed is None else round((completed - created) * 1e3, 3),
        "input_dtypes": ["BFloat16"], "input_sizes": [list(s) for s in op.sizes], "is_p2p": op.p2p,
        "op_id": p2p_seq if op.p2p else seq, "output_dtypes": ["BFloat16"],
        "output_sizes": [list(s) for s in op.out_sizes], "p2p_seq_id": p2p_seq, "pg_id": pg_id,
        "process_group": [pg, ""], "profiling_name": f"nccl:{op.name}", "record_id": record,
        "retired": completed is not None, "state": "completed" if completed is not None else "started",
        "thread_id": "140113885917504", "thread_name": "pt_main_thread", "time_created_ns": ns,
        "time_discovered_completed_ns": int(completed * 1e9) if completed is not None else None,
        "time_discovered_started_ns": ns + 40_000, "timeout_ms": TIMEOUT_MS,
    }


__all__ = ["Op", "Clock", "step_ops", "position", "group_names", "dump_json"]
