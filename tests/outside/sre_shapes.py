"""Incidents as an SRE lives them, written from docs/events.md alone, with the verdicts a person expects.

    python -m tests.outside.sre_shapes OUT_DIR [NAMES...] [--combined FILE]

Round 3 of the outside check (helper O5). Rounds 1-2 hung, slowed, flapped and silenced a job one
fault at a time; these are the days that look like faults and are not, or are faults inside a
larger normal: an MoE job's one slow expert rank, a pipeline whose last stage always computes
longer, a checkpoint that stalls every rank for 4 minutes, a rolling driver upgrade, a job that
ends, two jobs under one switch with one flapping NIC, a machine whose clock is 30 s behind.
Written before reading any detector: the machines, beats and samples are round 1's
(tests/outside/job_shape.py), their lifetimes, clocks and steps this round's own (tests/outside/sre_machines.py).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

from tests.outside.job_shape import (
    COMPUTE_S,
    SWITCHES,
    Job,
    Trace,
    machine_names,
)
from tests.outside.sre_machines import FIRST_STEP, LENGTH, Life, Steps, machine, steps
from tests.outside.write_traces import write_scenarios, writer_main

START = 1_772_700_000.0  # 2026-03-05 08:40 UTC
SLACK = 60.0

Expect = dict


def _verdict(job: str, fault: str, nodes: list[str], action: str, base: float, first: float, last: float | None = None) -> Expect:
    return {
        "job": job,
        "fault": fault,
        "nodes": sorted(nodes),
        "action": action,
        "onset_from": base + first - SLACK,
        "onset_to": base + (last if last is not None else first) + SLACK,
    }


def _plain(trace: Trace, job: Job, base: float, length: float = LENGTH, lives: dict[str, Life] | None = None, **life) -> None:
    trace.emit(base, job.name, "-", "job", "topology", job.topology())
    for i, node in enumerate(job.nodes):
        machine(trace, job.name, node, i, base, (lives or {}).get(node) or Life(**life), length)


# --- stacks (py-spy text: benfred/py-spy src/dump.rs print_traces), innermost frame first --------------
_HEAD = (
    "Process {pid}: /usr/bin/python3 -u pretrain_gpt.py --num-experts 16 --expert-model-parallel-size 4\n"
    'Python v3.11.9 (/usr/bin/python3.11)\n\nThread {pid} (active): "MainThread"\n'
)
_IDLE_HEAD = _HEAD.replace("(active)", "(idle)")
_TAIL = (
    "    forward_step (pretrain_gpt.py:160)\n"
    "    forward_backward_pipelining_without_interleaving (megatron/core/pipeline_parallel/schedules.py:1420)\n"
    "    train_step (megatron/training/training.py:731)\n"
    "    train (megatron/training/training.py:1180)\n"
    "    pretrain (megatron/training/training.py:361)\n"
    "    <module> (pretrain_gpt.py:240)\n"
)
_EXPERT_GEMM = (
    "    gmm (grouped_gemm/ops.py:12)\n"
    "    forward (megatron/core/transformer/moe/experts.py:258)\n"
    "    forward (megatron/core/transformer/moe/moe_layer.py:150)\n"
    "    forward (megatron/core/transformer/transformer_layer.py:402)\n"
) + _TAIL
_ALL_TO_ALL = (
    "    all_to_all_single (torch/distributed/distributed_c10d.py:4120)\n"
    "    forward (megatron/core/tensor_parallel/mappings.py:390)\n"
    "    all_to_all (megatron/core/tensor_parallel/mappings.py:480)\n"
    "    token_unpermutation (megatron/core/transformer/moe/token_dispatcher.py:610)\n"
    "    forward (megatron/core/transformer/moe/moe_layer.py:155)\n"
    "    forward (megatron/core/transformer/transformer_layer.py:402)\n"
) + _TAIL
_FULL_SAVE = (
    "    write (torch/serialization.py:850)\n"
    "    _save (torch/serialization.py:880)\n"
    "    save (torch/serialization.py:650)\n"
    "    save_checkpoint (megatron/training/checkpointing.py:470)\n"
    "    train (megatron/training/training.py:1240)\n"
    "    pretrain (megatron/training/training.py:361)\n"
    "    <module> (pretrain_gpt.py:240)\n"
)
_SAVE_BARRIER = (
    "    barrier (torch/distributed/distributed_c10d.py:4160)\n"
    "    save_checkpoint (megatron/training/checkpointing.py:498)\n"
    "    train (megatron/training/training.py:1240)\n"
    "    pretrain (megatron/training/training.py:361)\n"
    "    <module> (pretrain_gpt.py:240)\n"
)
_DCP_WRITE = (
    "    write (torch/serialization.py:850)\n"
    "    _write_item (torch/distributed/checkpoint/filesystem.py:160)\n"
    "    _write_files_from_queue (torch/distributed/checkpoint/filesystem.py:312)\n"
    "    write_data (torch/distributed/checkpoint/filesystem.py:590)\n"
    "    save (torch/distributed/checkpoint/state_dict_saver.py:150)\n"
    "    save_checkpoint (megatron/training/checkpointing.py:480)\n"
    "    train (megatron/training/training.py:1240)\n"
    "    pretrain (megatron/training/training.py:361)\n"
    "    <module> (pretrain_gpt.py:240)\n"
)


def _dumps(trace: Trace, job: Job, at: float, request: str, stack_of: Callable[[dict], str]) -> None:
    for r in job.ranks:
        pid = 41_000 + 10 * job.nodes.index(r["node"]) + r["tp"]
        trace.emit(
            at + 0.05 * r["rank"],
            job.name,
            r["node"],
            "stack",
            "stack_dump",
            {
                "rank": r["rank"],
                "pid": pid,
                "tool": "py-spy",
                "ok": True,
                "request_id": request,
                "rank_env": "RANK",
                "dump": stack_of(r).format(pid=pid),
            },
        )


# --- the incidents -------------------------------------------------------------------------------------
def moe_slow_expert(trace: Trace, base: float) -> list[Expect]:
    """A MoE job (experts spread over the 4 data-parallel ranks of each tensor and pipeline slot):
    rank 37's GPU computes its experts 35 % slower from minute 3, so every all_to_all waits on it and
    the whole job's steps slow. Five stack captures 10 s apart find it in its expert GEMM while every
    other rank waits in the token all_to_all. No counter of its GPU differs from its peers' and the
    slowness is seen at one look only, as a hot expert would be: an alert naming its machine, no
    eviction (diagnosis.peers.slow_evidence; tests/outside/slow_shapes.py follows it further)."""
    job = Job("outside-moe", machine_names("moe", 16))
    slow = 37
    bad = job.node_of(slow)
    _plain(trace, job, base)
    steps(
        trace, job, base, Steps(0.0, LENGTH, compute=lambda r, t: COMPUTE_S * (1.35 if r["rank"] == slow and t >= 180 else 1.0))
    )
    for k in range(5):  # the agents' answers to the rounds a suspicion 30 s after the slowdown asks for
        _dumps(
            trace,
            job,
            base + 225.0 + 10.0 * k,
            f"outside-moe-round-{k + 1}",
            lambda r: (_HEAD + _EXPERT_GEMM) if r["rank"] == slow else (_IDLE_HEAD + _ALL_TO_ALL),
        )
    return [_verdict(job.name, "fail_slow", [bad], "alert", base, 180.0, 350.0)]


def pp_bubbles(trace: Trace, base: float) -> list[Expect]:
    """A 4-stage pipeline whose last stage (the output layer and the loss) computes 25 % longer and
    whose first (the embedding) 10 % longer than the middle ones, from the first step to the last:
    the other stages' bubbles, by design. Nothing is wrong; the 4 machines of the last stage always
    look slow beside their peers."""
    job = Job("outside-pp", machine_names("pp", 16))
    extra = {0: 1.10, 1: 1.0, 2: 1.0, 3: 1.25}
    _plain(trace, job, base)
    steps(trace, job, base, Steps(0.0, LENGTH, compute=lambda r, t: COMPUTE_S * extra[r["pp"]]))
    return []


def _save(trace: Trace, base: float, name: str, stack_of: Callable[[dict], str]) -> None:
    """At minute 5 the job saves a checkpoint: no rank steps for 4 minutes, the GPUs idle, every
    rank's stack captured 75 s in; then each rank reports the checkpoint and training goes on."""
    job = Job(f"outside-{name}", machine_names(name, 16))
    save = (300.0, 540.0)
    _plain(trace, job, base, idle=[save])
    last = steps(trace, job, base, Steps(0.0, save[0]))
    for r in job.ranks:
        trace.emit(
            base + save[1] - 1.0 + 0.002 * r["rank"],
            job.name,
            r["node"],
            "train",
            "checkpoint",
            {"rank": r["rank"], "step": last, "path": f"/lustre/ckpt/{job.name}/iter_{last:07d}"},
        )
    steps(trace, job, base, Steps(save[1], LENGTH, step=last))
    _dumps(trace, job, base + save[0] + 75.0, f"{job.name}-capture-1", stack_of)


def checkpoint_stall(trace: Trace, base: float) -> list[Expect]:
    """A sharded save to the parallel filesystem: every rank in torch.distributed.checkpoint's write. Healthy."""
    _save(trace, base, "ckpt", lambda r: _IDLE_HEAD + _DCP_WRITE)
    return []


def checkpoint_one_writer(trace: Trace, base: float) -> list[Expect]:
    """A full state dict saved by rank 0 alone (torch.save), the 63 others in the barrier after the
    save for the 4 minutes it takes. Healthy: its machine is no slower than the filer."""
    _save(trace, base, "ckpt1", lambda r: (_HEAD + _FULL_SAVE) if r["rank"] == 0 else (_IDLE_HEAD + _SAVE_BARRIER))
    return []


_BOOT = (
    "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) #45-Ubuntu SMP PREEMPT_DYNAMIC",
    "nvidia: module license 'NVIDIA' taints kernel.",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  560.35.03  Fri Aug 16 21:39:15 UTC 2024",
    "mlx5_core 0000:c1:00.0: firmware version: 28.41.1000",
    "mlx5_core 0000:c1:00.0 ibp193s0: Link up",
)


def rolling_upgrade(trace: Trace, base: float) -> list[Expect]:
    """The site upgrades the GPU driver machine by machine under a running job: every 150 s the
    scheduler drains one machine (kills its trainers, then stops its agent, whose last beat says so;
    the launcher restarts the job
    with a spare in its place, resuming from the latest checkpoint a minute later), the machine
    reboots into the new driver (its agent, started at boot, reads the boot's kernel lines) and
    comes back as the spare for the next one. Four machines; nothing is broken."""
    nodes = machine_names("up", 16)
    spare = "up-r5-01"
    job = Job("outside-upgrade", nodes)
    trace.emit(base, job.name, "-", "job", "topology", job.topology())
    lives: dict[str, list[Life]] = {n: [Life()] for n in nodes}
    lives[spare] = [Life(pids_from=LENGTH)]
    order = nodes[:4]
    step, t = FIRST_STEP, 0.0
    current = list(nodes)
    for k, out in enumerate(order):
        swap = 120.0 + 150.0 * k
        step = steps(trace, Job(job.name, current), base, Steps(t, swap, step=step))
        incoming = spare if k == 0 else order[k - 1]
        # The drain kills the machine's trainers, then stops its agent (its last beat says so).
        lives[out][-1].end, lives[out][-1].stopping, lives[out][-1].pids_until = swap, True, swap - 8.0
        lives[incoming][-1].pids_from = swap + 60.0
        current = [incoming if n == out else n for n in current]
        trace.emit(
            base + swap + 50.0,
            job.name,
            "-",
            "job",
            "restart",
            {
                "reason": f"node {out} drained for a driver upgrade",
                "command_id": None,
                "nodes_out": [out],
                "nodes_in": [incoming],
                "attempt": k + 1,
                "resume": "latest",
            },
        )
        trace.emit(base + swap + 50.5, job.name, "-", "job", "topology", Job(job.name, current).topology())
        step -= 25  # resumed from the latest checkpoint, 25 steps back
        t = swap + 60.0
        if k + 1 < len(order):
            lives[out].append(Life(start=swap + 75.0, pids_from=LENGTH))
            for i, text in enumerate(_BOOT):
                trace.emit(
                    base + swap + 75.1 + 0.01 * i, job.name, out, "kernel", "line", {"line": f"[{2.0 + 3.1 * i:12.6f}] {text}"}
                )
    steps(trace, Job(job.name, current), base, Steps(t, LENGTH, step=step))
    for i, node in enumerate([*nodes, spare]):
        for life in lives[node]:
            machine(trace, job.name, node, i, base, life)
    return []


def job_end(trace: Trace, base: float) -> list[Expect]:
    """The job finishes at minute 5: no step after, its trainers exit 5 s later (the beats list no
    process), and the scheduler's epilogue stops the 16 agents one by one over 2 minutes, killed
    without a last word; its launcher sends no `job/end`. A 4-machine job beside it trains on."""
    job = Job("outside-ends", machine_names("end", 16))
    other = Job("outside-ends-neighbour", machine_names("nbr", 4), tp=4, pp=1, dp=4)
    trace.emit(base, job.name, "-", "job", "topology", job.topology())
    for i, node in enumerate(job.nodes):
        machine(trace, job.name, node, i, base, Life(end=312.0 + 8.0 * i, pids_until=305.0))
    steps(trace, job, base, Steps(0.0, 300.0))
    _plain(trace, other, base)
    steps(trace, other, base, Steps(0.0, LENGTH))
    return []


def shared_switch_flap(trace: Trace, base: float) -> list[Expect]:
    """Two 8-machine jobs under one leaf switch; one port of job B's fourth machine goes down and up
    four times in 3 minutes (8 s each time), stalling job B while it is down. Job A is untouched."""
    a = Job("outside-switch-a", machine_names("sa", 8), tp=4, pp=2, dp=4)
    b = Job("outside-switch-b", machine_names("sb", 8), tp=4, pp=2, dp=4)
    for job in (a, b):
        for port, node in enumerate(job.nodes):
            job.machines[node].update(ib_switch=SWITCHES[0], ib_port=port + 1 + (8 if job is b else 0))
    bad = b.nodes[3]
    spans = [(300.0 + 60.0 * i, 308.0 + 60.0 * i) for i in range(4)]
    _plain(trace, a, base)
    _plain(trace, b, base, lives={bad: Life(port_down=spans)})
    steps(trace, a, base, Steps(0.0, LENGTH))
    steps(trace, b, base, Steps(0.0, LENGTH, pauses=spans))
    for down, up in spans:
        trace.emit(
            base + down,
            b.name,
            bad,
            "kernel",
            "line",
            {"line": f"[{777_000.0 + down:.6f}] mlx5_core 0000:c1:00.0 ibp193s0: Link down"},
        )
        trace.emit(
            base + up, b.name, bad, "kernel", "line", {"line": f"[{777_000.0 + up:.6f}] mlx5_core 0000:c1:00.0 ibp193s0: Link up"}
        )
    return [_verdict(b.name, "nic", [bad], "evict", base, 300.0, 360.0)]


def clock_skew(trace: Trace, base: float) -> list[Expect]:
    """One machine's clock runs 30 s behind (its time service broke): every stamp it writes is 30 s
    early. The job is healthy; the machine too, but for its clock."""
    job = Job("outside-skew", machine_names("skw", 16))
    behind = job.nodes[6]
    trace.emit(base, job.name, "-", "job", "topology", job.topology())
    for i, node in enumerate(job.nodes):
        machine(trace, job.name, node, i, base, Life(skew=-30.0 if node == behind else 0.0))
    steps(trace, job, base, Steps(0.0, LENGTH, skew={behind: -30.0}))
    return []


SCENARIOS: dict[str, Callable[[Trace, float], list[Expect]]] = {
    "moe_slow_expert": moe_slow_expert,
    "pp_bubbles": pp_bubbles,
    "checkpoint_stall": checkpoint_stall,
    "rolling_upgrade": rolling_upgrade,
    "job_end": job_end,
    "shared_switch_flap": shared_switch_flap,
    "clock_skew": clock_skew,
    "checkpoint_one_writer": checkpoint_one_writer,
}


def write_all(out: Path, names: list[str] | None = None, combined: Path | None = None) -> list[Path]:
    """Each of ``names`` (default all) as a trace with its expect file, one after another in event
    time with no gap (``combined``: all of them as one stream)."""
    written = write_scenarios(out, SCENARIOS, names, seed=500, combined=combined,
                              start=lambda i, k: START + math.floor(k * (LENGTH + 60.0)))
    return [out / f"{name}.parquet" for name in written]


def main(argv: list[str] | None = None) -> int:
    return writer_main(argv, __doc__, SCENARIOS, write_all, combined=True)


if __name__ == "__main__":
    sys.exit(main())
