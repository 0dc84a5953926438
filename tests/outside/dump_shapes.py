"""Hung jobs of other trainers' shapes, with the stack and Flight Recorder dumps their agents would send.

    python -m tests.outside.dump_shapes OUT_DIR

Round 2 of the outside check (helper O3): round 1 (tests/outside/write_traces.py) hung one
Megatron job of 16 x 4 GPUs with py-spy text dumps. These hang other shapes, written from
docs/events.md (`stack`/`stack_dump`, `stack`/`recorder_dump`) and the tools' own output formats,
not from faultlens's code:

- py-spy text: the format `py-spy dump` prints (benfred/py-spy src/dump.rs, print_traces);
- py-spy `--json`: the JSON list of `StackTrace` that `py-spy dump --json` prints instead
  (benfred/py-spy src/dump.rs and src/stack_trace.rs: `pid`, `thread_id`, `thread_name`,
  `os_thread_id`, `active`, `owns_gil`, `frames` innermost first, each `name`, `filename`,
  `module`, `short_filename`, `line`, `locals`);
- torch Flight Recorder JSON: the NCCL recorder's dump as torch 2.10 writes it (`version`,
  `comm_lib_version`, `pg_config` {name: {name, desc, ranks: "[..]"}}, `pg_status` with numbers as
  strings, `entries` with `collective_seq_id`, `profiling_name` `nccl:<op>`, `state`, `retired`,
  `input_sizes`, ...), the shape of pytorch's tools/flight_recorder readers and of the real
  capture in tests/fixtures/real_gpu/gpu40/fr_nccl.json.

Frame names are those of the libraries' public sources (DeepSpeed's ZeRO-3 coordinator, torch FSDP
and torch.save, Megatron's pipeline p2p, JAX's pjit); the telemetry around them is round 1's
(tests/outside/telemetry.py). The stacks are in tests/outside/dump_stacks.py, the formats written in
tests/outside/dump_formats.py. Every trace: 200 s of training, then no step ends; every rank's
dump arrives 80 s after the last step, as a capture_stacks answer would.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import tests.outside.job_shape as job_shape
import tests.outside.telemetry as telemetry
from tests.outside.dump_formats import Group, pyspy_json, pyspy_text, recorder_json
from tests.outside.dump_stacks import (
    _CKPT_WRITE,
    _FSDP_BARRIER,
    _JAX_DATA,
    _JAX_STEP,
    _LOADER_WAIT,
    _MEGATRON_COMPUTE,
    _MEGATRON_RECV_BWD,
    _MEGATRON_RECV_FWD,
    _MEGATRON_TP_WAIT,
    _ZERO3_GATHER,
)
from tests.outside.job_shape import Job, Trace, machine_names
from tests.outside.telemetry import Knobs, write_job
from tests.outside.write_traces import write_scenarios, writer_main

START = 1_772_532_000.0      # 2026-03-03 10:00:00 UTC
LENGTH = 420.0
HANG_AT = 200.0
DUMP_AFTER = 80.0
SLACK = 60.0


@dataclass
class Shape:
    """A job of a given rank layout: ``placement`` lists (rank, node index, tp, pp, dp)."""

    name: str
    machines: int
    gpus: int
    tp: int
    pp: int
    dp: int
    placement: list[tuple[int, int, int, int, int]] = field(default_factory=list)

    def job(self) -> Job:
        nodes = machine_names(self.name.split("-")[1], self.machines)
        ranks = [{"rank": r, "node": nodes[n], "tp": tp, "pp": pp, "dp": dp} for r, n, tp, pp, dp in self.placement]
        return Job(f"outside-{self.name}", nodes, tp=self.tp, pp=self.pp, dp=self.dp, ranks=ranks)


@contextmanager
def gpus_per_node(n: int):
    """Round 1's telemetry writes GPUS GPUs a machine; these shapes have 8 or 16."""
    saved = job_shape.GPUS, telemetry.GPUS
    job_shape.GPUS = telemetry.GPUS = n
    try:
        yield
    finally:
        job_shape.GPUS, telemetry.GPUS = saved


# --- the traces ------------------------------------------------------------------------------------
Expect = dict


@dataclass
class Hung:
    """What one scenario says: the trace's events are in ``trace``; the user's expectation and what
    a person would also accept (another action naming the same machines, never another machine)."""

    job: Job
    expect: list[Expect]
    accept_actions: frozenset[str]
    blamed: frozenset[str]      # the machines a person would accept being named (empty: nobody)


def _hung_job(trace: Trace, shape: Shape, base: float) -> Job:
    job = shape.job()
    with gpus_per_node(shape.gpus):
        write_job(trace, job, base, LENGTH, Knobs(steps_stop=HANG_AT))
    return job


def _pid(job: Job, rank: int) -> int:
    """The pid the machine's heartbeats list for this rank (tests/outside/telemetry.py numbering)."""
    node = job.node_of(rank)
    return 41_000 + 10 * job.nodes.index(node) + job.ranks_of(node).index(rank)


def _dump(trace: Trace, job: Job, base: float, rank: int, pid: int, text: str, request: str) -> None:
    trace.emit(base + HANG_AT + DUMP_AFTER + 0.02 * rank, job.name, job.node_of(rank), "stack", "stack_dump",
               {"rank": rank, "pid": pid, "tool": "py-spy", "ok": True, "request_id": request, "rank_env": "RANK",
                "dump": text})


def _verdict(job: str, fault: str, nodes: list[str], action: str, base: float) -> Expect:
    return {"job": job, "fault": fault, "nodes": sorted(nodes), "action": action,
            "onset_from": base + HANG_AT - SLACK, "onset_to": base + HANG_AT + DUMP_AFTER + SLACK}


def zero3_json(trace: Trace, base: float) -> Hung:
    """DeepSpeed ZeRO-3, 4 machines x 8 GPUs, pure data parallel (rank = machine * 8 + local rank);
    rank 13 waits on its DataLoader's workers (a worker stuck reading), the other 31 wait in ZeRO-3's
    parameter all-gather. py-spy `--json` dumps."""
    shape = Shape("zero3-dsx", 4, 8, 1, 1, 32, [(r, r // 8, 0, 0, r) for r in range(32)])
    job = _hung_job(trace, shape, base)
    for r in job.ranks:
        stack = _LOADER_WAIT if r["rank"] == 13 else _ZERO3_GATHER
        _dump(trace, job, base, r["rank"], _pid(job, r["rank"]), pyspy_json(_pid(job, r["rank"]), stack),
              "zero3-capture-1")
    bad = job.node_of(13)
    return Hung(job, [_verdict(job.name, "job_hang", [bad], "evict", base)],
                frozenset({"evict", "stop_time_diagnosis", "alert"}), frozenset({bad}))


def zero3_two_loaders(trace: Trace, base: float) -> Hung:
    """The ZeRO-3 job of zero3_json with two ranks on two machines stuck on their DataLoaders (ranks
    5 and 26): in pure data parallelism the only group holding both is the whole job, and the two
    machines in between are healthy. Their own two machines, or an alert; never all four."""
    shape = Shape("zero3two-dsx", 4, 8, 1, 1, 32, [(r, r // 8, 0, 0, r) for r in range(32)])
    job = _hung_job(trace, shape, base)
    for r in job.ranks:
        pid = _pid(job, r["rank"])
        stack = _LOADER_WAIT if r["rank"] in (5, 26) else _ZERO3_GATHER
        _dump(trace, job, base, r["rank"], pid, pyspy_json(pid, stack), "zero3two-capture-1")
    bad = [job.node_of(5), job.node_of(26)]
    return Hung(job, [_verdict(job.name, "job_hang", bad, "evict", base)],
                frozenset({"evict", "alert", "stop_time_diagnosis"}), frozenset(bad))


def zero3_three_loaders(trace: Trace, base: float) -> Hung:
    """The same job with three ranks on three of its four machines stuck on their DataLoaders
    (5, 13, 26): stuck alike on most of the job's machines is what they share (the dataset's
    storage), not three machines failing at once. An alert; nobody evicted."""
    shape = Shape("zero3three-dsx", 4, 8, 1, 1, 32, [(r, r // 8, 0, 0, r) for r in range(32)])
    job = _hung_job(trace, shape, base)
    for r in job.ranks:
        pid = _pid(job, r["rank"])
        stack = _LOADER_WAIT if r["rank"] in (5, 13, 26) else _ZERO3_GATHER
        _dump(trace, job, base, r["rank"], pid, pyspy_json(pid, stack), "zero3three-capture-1")
    bad = [job.node_of(5), job.node_of(13), job.node_of(26)]
    return Hung(job, [_verdict(job.name, "job_hang", bad, "alert", base)],
                frozenset({"alert", "stop_time_diagnosis"}), frozenset(bad))


def fsdp_checkpoint(trace: Trace, base: float) -> Hung:
    """torch FSDP on 2 machines x 16 GPUs (an HGX-2 shape), rank = machine * 16 + local; rank 21 is
    still inside torch.save writing its shard while the 31 others wait in the barrier after the save.
    py-spy text dumps."""
    shape = Shape("fsdp16-dgx2", 2, 16, 1, 1, 32, [(r, r // 16, 0, 0, r) for r in range(32)])
    job = _hung_job(trace, shape, base)
    cmd = "/opt/conda/bin/python3.11 -u fsdp_train.py --sharding FULL_SHARD"
    for r in job.ranks:
        pid = _pid(job, r["rank"])
        _dump(trace, job, base, r["rank"], pid, pyspy_text(pid, cmd, _CKPT_WRITE if r["rank"] == 21 else _FSDP_BARRIER),
              "fsdp-capture-1")
    bad = job.node_of(21)
    # 80 s into the stall one capture cannot tell a slow save from a stuck one (round 3's
    # sre_shapes checkpoint_one_writer: a healthy 4-minute save evicted its writer's machine): a save
    # under way, recorded, looked at again after the patience (diagnosis/hang/saving.py); then an
    # alert naming its machine, never an eviction. Nothing acting within this trace.
    return Hung(job, [], frozenset({"none", "alert"}), frozenset({bad}))


def fsdp_filer(trace: Trace, base: float) -> Hung:
    """FSDP as above, saving a full state dict from rank 0 alone to an NFS filer that stops
    answering: rank 0 sits in torch.save, the 31 others in the barrier, and rank 0's machine logs
    `nfs: server filer01 not responding, still trying` (docs/events.md `nfs_error`: job-wide, an
    alert). The filer is at fault: a new machine for rank 0 would hang on the same write."""
    shape = Shape("fsdpnfs-dgx2", 2, 16, 1, 1, 32, [(r, r // 16, 0, 0, r) for r in range(32)])
    job = _hung_job(trace, shape, base)
    cmd = "/opt/conda/bin/python3.11 -u fsdp_train.py --sharding FULL_SHARD --state-dict full"
    for r in job.ranks:
        pid = _pid(job, r["rank"])
        _dump(trace, job, base, r["rank"], pid, pyspy_text(pid, cmd, _CKPT_WRITE if r["rank"] == 0 else _FSDP_BARRIER),
              "fsdpnfs-capture-1")
    writer = job.node_of(0)
    for k in range(4):
        trace.kernel_line(base + HANG_AT + 5.0 + 30.0 * k, job.name, writer,
                          "nfs: server filer01 not responding, still trying")
    storage = {**_verdict(job.name, "storage", [], "alert", base), "onset_from": base + HANG_AT - SLACK}
    return Hung(job, [storage, _verdict(job.name, "job_hang", [writer], "alert", base)],
                frozenset({"alert", "stop_time_diagnosis"}), frozenset({writer}))


def megatron_pipeline(trace: Trace, base: float) -> Hung:
    """Megatron, tp 2 x pp 4 x dp 2 on 4 machines x 4 GPUs, one pipeline stage a machine (Megatron's
    own order: rank = pp * 4 + dp * 2 + tp). Rank 9 (stage 2) is stuck in its attention kernel; its
    tensor peer 8 waits in the TP all-reduce, stage 3 waits to receive its activations, stages 0-1
    wait for gradients to come back, the other dp replica of stage 2 too."""
    place = [(pp * 4 + dp * 2 + tp, pp, tp, pp, dp) for pp in range(4) for dp in range(2) for tp in range(2)]
    shape = Shape("mgpp-a100", 4, 4, 2, 4, 2, sorted(place))
    job = _hung_job(trace, shape, base)
    cmd = "/opt/conda/bin/python3.11 -u pretrain_gpt.py --pipeline-model-parallel-size 4"
    for r in job.ranks:
        rank, pp = r["rank"], r["pp"]
        if rank == 9:
            stack = _MEGATRON_COMPUTE
        elif rank == 8:
            stack = _MEGATRON_TP_WAIT
        elif pp == 3:
            stack = _MEGATRON_RECV_FWD
        elif pp == 2 and r["dp"] == 0:
            stack = _MEGATRON_RECV_FWD      # the other replica's stage 2 already ran ahead to its next recv
        else:
            stack = _MEGATRON_RECV_BWD
        pid = _pid(job, rank)
        _dump(trace, job, base, rank, pid, pyspy_text(pid, cmd, stack), "mgpp-capture-1")
    bad = job.node_of(9)
    return Hung(job, [_verdict(job.name, "job_hang", [bad], "evict", base)],
                frozenset({"evict", "stop_time_diagnosis", "alert"}), frozenset({bad}))


def jax_hosts(trace: Trace, base: float) -> Hung:
    """A JAX (MaxText-style) job: one process a host drives its 8 GPUs, 4 hosts, the topology's
    ranks are the processes. Host 2's process waits on its input pipeline (a torch DataLoader's
    pin-memory thread beside it, as in every dump here); the others are inside the jitted step,
    whose collectives run in XLA where py-spy sees no frame of them, all in the same call. Host 2
    is the one the others wait on, as round 1's data-loader hang: evict it, or an alert; no other."""
    shape = Shape("jax-tpuvm", 4, 8, 1, 1, 4, [(r, r, 0, 0, r) for r in range(4)])
    job = _hung_job(trace, shape, base)
    cmd = "/opt/conda/bin/python3.11 -u maxtext/train.py configs/base.yml"
    for r in job.ranks:
        pid = 41_000 + 10 * r["rank"]
        _dump(trace, job, base, r["rank"], pid, pyspy_text(pid, cmd, _JAX_DATA if r["rank"] == 2 else _JAX_STEP),
              "jax-capture-1")
    bad = job.node_of(2)
    return Hung(job, [_verdict(job.name, "job_hang", [bad], "evict", base)],
                frozenset({"evict", "alert", "stop_time_diagnosis"}), frozenset({bad}))


def _recorder(trace: Trace, job: Job, base: float, rank: int, pid: int, text: str, request: str) -> None:
    # Right behind the rank's stack dump, as a trainer hook sends its recorder after its stacks.
    trace.emit(base + HANG_AT + DUMP_AFTER + 0.001 + 0.02 * rank, job.name, job.node_of(rank), "stack",
               "recorder_dump", {"rank": rank, "pid": pid, "dump": text, "entries": text.count('"record_id"'),
                                 "truncated": False, "request_id": request})


def _fr_groups() -> list[Group]:
    """2 machines x 4 GPUs, tp 4 inside a machine, dp 2 across: torch names groups in creation order,
    the world "0", then the TP groups "1", "2", then the DP groups "3".."6"."""
    return ([Group("0", list(range(8))), Group("1", [0, 1, 2, 3]), Group("2", [4, 5, 6, 7])]
            + [Group(str(3 + i), [i, i + 4]) for i in range(4)])


def _fr_shape(name: str) -> Shape:
    return Shape(name, 2, 4, 4, 1, 2, [(r, r // 4, r % 4, 0, r // 4) for r in range(8)])


def fr_mismatch(trace: Trace, base: float) -> Hung:
    """Flight Recorder, 3 process groups a rank: in DP group "5" (ranks 2 and 6) rank 6 entered
    all_gather as #31 where rank 2 entered all_reduce (a trainer bug: a branch taken on one rank);
    both are held, and their TP peers wait in TP all_reduce #121 that 2 and 6 never entered. A
    mismatched collective is the program's fault, not a machine's: a person expects an alert."""
    job = _hung_job(trace, _fr_shape("frmis-hgx"), base)
    groups = _fr_groups()
    done = {"0": 3, "1": 120, "2": 120, "3": 30, "4": 30, "5": 30, "6": 30}
    for rank in range(8):
        held: dict[str, tuple[str, list]] = {}
        if rank == 2:
            held["5"] = ("all_reduce", [[4096, 1024]])
        elif rank == 6:
            held["5"] = ("all_gather", [[512, 1024]])
        else:
            held["1" if rank < 4 else "2"] = ("all_reduce", [[8192, 4096]])
        pid = _pid(job, rank)
        wait = (_ZERO3_GATHER if rank == 6 else _MEGATRON_TP_WAIT) if rank in (2, 6) else _MEGATRON_TP_WAIT
        _dump(trace, job, base, rank, pid, pyspy_text(pid, "python3 -u train.py", wait), "frmis-1")
        _recorder(trace, job, base, rank, pid, recorder_json(rank, groups, done, held, 1_772_532_000_000), "frmis-1")
    return Hung(job, [_verdict(job.name, "job_hang", [], "alert", base)],
                frozenset({"alert", "stop_time_diagnosis"}), frozenset())


def fr_never_joined(trace: Trace, base: float) -> Hung:
    """Flight Recorder, 3 process groups a rank: rank 5 never entered TP all_reduce #121 that its
    TP peers 4, 6, 7 hold, nor DP all_reduce #31 that rank 1 holds; its stack shows it stuck in its
    forward pass's attention kernel. The ranks of machine 0 wait in TP #121 of their own group,
    which rank 1 (held in DP) never entered. Rank 5's machine, nobody else."""
    job = _hung_job(trace, _fr_shape("frjoin-hgx"), base)
    groups = _fr_groups()
    done = {"0": 3, "1": 120, "2": 120, "3": 30, "4": 30, "5": 30, "6": 30}
    for rank in range(8):
        held: dict[str, tuple[str, list]] = {}
        if rank == 1:
            held["4"] = ("all_reduce", [[4096, 1024]])
            stack = _MEGATRON_TP_WAIT
        elif rank == 5:
            stack = _MEGATRON_COMPUTE
        else:
            held["1" if rank < 4 else "2"] = ("all_reduce", [[8192, 4096]])
            stack = _MEGATRON_TP_WAIT
        pid = _pid(job, rank)
        _dump(trace, job, base, rank, pid, pyspy_text(pid, "python3 -u train.py", stack), "frjoin-1")
        _recorder(trace, job, base, rank, pid, recorder_json(rank, groups, done, held, 1_772_532_000_000), "frjoin-1")
    bad = job.node_of(5)
    return Hung(job, [_verdict(job.name, "job_hang", [bad], "evict", base)],
                frozenset({"evict", "stop_time_diagnosis", "alert"}), frozenset({bad}))


SCENARIOS: dict[str, Callable[[Trace, float], Hung]] = {
    "zero3_json": zero3_json, "fsdp_checkpoint": fsdp_checkpoint, "megatron_pipeline": megatron_pipeline,
    "jax_hosts": jax_hosts, "fr_mismatch": fr_mismatch, "fr_never_joined": fr_never_joined,
    "fsdp_filer": fsdp_filer, "zero3_two_loaders": zero3_two_loaders, "zero3_three_loaders": zero3_three_loaders,
}


def write_all(out: Path, names: list[str] | None = None) -> dict[str, Hung]:
    """Each scenario's trace and `NAME.parquet.expect.jsonl`; the scenarios' Hung by name."""
    return write_scenarios(out, SCENARIOS, names, seed=100, start=lambda i, k: START + i * LENGTH,
                           expect=lambda hung: hung.expect)


def main(argv: list[str] | None = None) -> int:
    return writer_main(argv, __doc__, SCENARIOS, write_all)


if __name__ == "__main__":
    sys.exit(main())
