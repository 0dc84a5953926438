"""Fleets and agents of shapes not tried yet, written from the user docs alone, with the verdicts a person expects.

    python -m tests.outside.fleet_shapes OUT_DIR [NAMES...] [--combined FILE]

Round 4 of the outside check (helper O7). Rounds 1-3 ran one 16 x 4 GPU job of one GPU model whose
agents all spoke the newest payloads; these are fleets as they come: machines of 8 and of 4 GPUs
and an A100 beside H100s in one job, an elastic job that loses 8 of its 32 machines and takes them
back, an older driver that reports some values as null or not at all, an agent whose NVML thread
hung on one GPU, a trainer whose steps reach the broker in bursts, an Xid 48 among correctable ECC
counts elsewhere, every rank's NCCL watchdog timing out after one machine's NIC went down, a
machine whose clock runs 90 s ahead, and two jobs one after the other on the same machines.
Written from README.md, docs/events.md, docs/design.md, docs/replay_tests.md and the commands'
--help before any detector was read: machines and steps as rounds 1 and 3 lay them out
(tests/outside/job_shape.py, sre_machines.py's `steps`), the agents this file's own.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.outside.job_shape import Job, Trace, gpu_entry, host_sample, machine_names, net_port
from tests.outside.sre_machines import Steps, steps
from tests.outside.write_traces import write_scenarios, writer_main

START = 1_773_050_400.0  # 2026-03-09 10:00 UTC
LENGTH = 600.0
FAULT_AT = 300.0
SLACK = 60.0

Expect = dict
Spans = list[tuple[float, float]]


@dataclass
class Agent:
    """One machine's node agent over the trace (times in seconds after the trace's start)."""

    gpus: int = 4
    start: float = 0.0
    end: float | None = None  # its last beat (None: the trace's end)
    stopping: bool = False  # that last beat says it was stopped on purpose
    training: Spans = field(default_factory=lambda: [(0.0, math.inf)])  # its beats list trainers inside these
    skew: float = 0.0  # added to every stamp it writes
    gpu: Callable[[dict, float], dict | None] = lambda g, t: g  # noqa: E731  what the driver reports of a GPU at t (None: left out)
    beat_extra: Callable[[float], dict] = lambda t: {}  # noqa: E731  keys its beat adds at t
    port_down: Spans = field(default_factory=list)


def _inside(t: float, spans: Spans) -> bool:
    return any(a <= t < b for a, b in spans)


def agent(
    trace: Trace, job: str | Callable[[float], str], node: str, index: int, base: float, life: Agent, length: float = LENGTH
) -> None:
    """A beat every 5 s, GPU and net samples every 10 s, host every 30 s (docs/events.md)."""
    rng = trace.rng
    pids = [41_000 + 10 * index + g for g in range(life.gpus)]
    end = min(length, life.end if life.end is not None else length)
    t = life.start + 0.37 * index % 5.0
    seq = 0
    while t < end:
        name = job(t) if callable(job) else job
        ts = base + t + life.skew
        seq += 1
        beat: dict = {
            "seq": seq,
            "pids": pids if _inside(t, life.training) else [],
            "sources": {"nvml": "ok", "kernel": "ok", "nccl": "ok", "net": "ok"},
        }
        beat.update(life.beat_extra(t))
        if t + 5.0 >= end and life.end is not None and life.stopping:
            beat["stopping"] = True
        trace.emit(ts, name, node, "heartbeat", "beat", beat)
        if seq % 2 == 1:
            gpus = [g for g in (life.gpu(gpu_entry(rng, node, i), t) for i in range(life.gpus)) if g is not None]
            trace.emit(ts + 0.2, name, node, "gpu", "sample", {"gpus": gpus, "interval_s": 10.0})
            downed = sum(1 for a, _ in life.port_down if t - 10.0 <= a < t)
            port = net_port("DOWN" if _inside(t, life.port_down) else "ACTIVE", downed)
            trace.emit(ts + 0.4, name, node, "net", "sample", {"interval_s": 10.0 if seq > 1 else 0.0, "ports": [port]})
        if seq % 6 == 1:
            trace.emit(ts + 0.6, name, node, "host", "sample", host_sample(rng))
        t += 5.0


def _verdict(job: str, fault: str, nodes: list[str], action: str, base: float, first: float) -> Expect:
    return {
        "job": job,
        "fault": fault,
        "nodes": sorted(nodes),
        "action": action,
        "onset_from": base + first - SLACK,
        "onset_to": base + first + SLACK,
    }


def _job(
    trace: Trace,
    job: Job,
    base: float,
    agents: dict[str, Agent] | None = None,
    *,
    run: Steps | None = None,
    topology: dict | None = None,
    length: float = LENGTH,
) -> None:
    trace.emit(base, job.name, "-", "job", "topology", topology or job.topology())
    for i, node in enumerate(job.nodes):
        agent(trace, job.name, node, i, base, (agents or {}).get(node) or Agent(), length)
    steps(trace, job, base, run or Steps(0.0, length))


def _exit_lines(trace: Trace, job: Job, at: float, text: str, who: Callable[[dict], bool] = lambda r: True) -> None:
    """Every chosen rank's trainer log line at ``at`` (torch's `[rankN]:` prefix, c10d's glog stamp)."""
    clock = f"{int(at // 60 % 60):02d}:{at % 60:09.6f}"
    for r in job.ranks:
        if who(r):
            trace.log_line(
                at + 0.01 * r["rank"],
                job.name,
                r["node"],
                f"[rank{r['rank']}]:[E309 10:{clock} ProcessGroupNCCL.cpp:1505] {text.format(rank=r['rank'])}",
            )


# --- the scenarios -------------------------------------------------------------------------------------


def _a100(g: dict, t: float) -> dict:
    """An A100 80GB as NVML reports it under load: 1410 MHz max clock, a 400 W limit."""
    g.update(
        sm_clock_mhz=1410,
        sm_clock_max_mhz=1410,
        mem_clock_mhz=1593,
        mem_total_mb=81920,
        power_w=round(g["power_w"] * 330.0 / 590.0, 1),
        power_limit_w=400.0,
        temp_c=round(g["temp_c"] - 6.0, 1),
    )
    return g


def mixed_fleet(trace: Trace, base: float) -> list[Expect]:
    """tp 4 x pp 4 x dp 4 on 4 machines of 8 H100s (two (pp, dp) cells each) and 8 of 4 GPUs, two of
    those A100s: lower clocks and power than the H100s by their model, as fast per step (the job's
    batches sized to them). Healthy."""
    eights, fours = machine_names("dgx", 4), machine_names("hgx", 8)
    a100s = set(fours[-2:])
    cells = [n for n in eights for _ in range(2)] + fours  # (pp, dp) cell i → its machine
    ranks = sorted(
        (
            {"rank": tp * 16 + pp * 4 + dp, "node": cells[pp * 4 + dp], "tp": tp, "pp": pp, "dp": dp}
            for tp in range(4)
            for pp in range(4)
            for dp in range(4)
        ),
        key=lambda r: r["rank"],
    )
    job = Job("fleet-mixed", eights + fours, ranks=ranks)
    topology = {"tp": 4, "pp": 4, "dp": 4, "ranks": ranks, "machines": job.machines}
    agents = {n: Agent(gpus=8) for n in eights} | {n: Agent(gpu=_a100) for n in a100s}
    _job(trace, job, base, agents, topology=topology)
    return []


ELASTIC_LENGTH = 720.0


def elastic(trace: Trace, base: float) -> list[Expect]:
    """32 x 4 GPUs (dp 8). At 200 s the scheduler takes 8 machines back (their trainers exit, their
    agents stopped with `stopping`), the launcher restarts on 24 (`job/restart`, dp 6, from the
    checkpoint of 150 s); at 420 s the 8 are given back and the job restarts on 32. Healthy."""
    nodes = machine_names("elx", 32)
    name = "fleet-elastic"
    full, small = Job(name, nodes, dp=8), Job(name, nodes[:24], dp=6)
    out, back = 200.0, 420.0
    stay = Agent(training=[(0.0, out), (out + 70.0, back + 20.0), (back + 50.0, math.inf)])
    leave = Agent(end=out + 10.0, stopping=True, training=[(0.0, out)])
    ret = Agent(start=back - 20.0, training=[(back + 50.0, math.inf)])
    trace.emit(base, name, "-", "job", "topology", full.topology())
    for i, node in enumerate(nodes):
        agent(trace, name, node, i, base, stay if i < 24 else leave, ELASTIC_LENGTH)
        if i >= 24:
            agent(trace, name, node, i, base, ret, ELASTIC_LENGTH)
    saved = steps(trace, full, base, Steps(0.0, 150.0))
    trace.emit(base + 151.0, name, nodes[0], "train", "checkpoint", {"rank": 0, "step": saved, "path": f"/ckpt/{saved}"})
    last = steps(trace, full, base, Steps(150.0, out, step=saved))
    trace.emit(
        base + out + 5.0,
        name,
        "-",
        "job",
        "restart",
        {
            "reason": "nodes left the rendezvous",
            "command_id": None,
            "nodes_out": nodes[24:],
            "nodes_in": [],
            "attempt": 1,
            "resume": "latest",
        },
    )
    trace.emit(base + out + 60.0, name, "-", "job", "topology", small.topology())
    last = steps(trace, small, base, Steps(out + 80.0, back, step=saved))
    trace.emit(
        base + back + 5.0,
        name,
        "-",
        "job",
        "restart",
        {
            "reason": "nodes joined the rendezvous",
            "command_id": None,
            "nodes_out": [],
            "nodes_in": nodes[24:],
            "attempt": 2,
            "resume": "latest",
        },
    )
    trace.emit(base + back + 40.0, name, "-", "job", "topology", full.topology())
    steps(trace, full, base, Steps(back + 60.0, ELASTIC_LENGTH, step=last))
    return []


_OLD_DRIVER_NULL = (
    "remap_correctable",
    "remap_uncorrectable",
    "remap_pending",
    "remap_failure",
    "nvlink_errors",
    "sm_clock_max_mhz",
    "retired_pending",
)
_OLD_AGENT_ABSENT = ("recovery_action", "pcie_replay", "mem_util", "ecc_sbe_aggregate", "ecc_dbe_aggregate")


def _old_driver(g: dict, t: float) -> dict:
    """An older driver: row remapping, NVLink counters, the max clock read as null; an older agent
    leaves some keys out altogether."""
    g.update({k: None for k in _OLD_DRIVER_NULL})
    for k in _OLD_AGENT_ABSENT:
        g.pop(k)
    return g


def nvml_nulls(trace: Trace, base: float) -> list[Expect]:
    """16 x 4 GPUs, half the machines on an older driver and agent: values null or missing. Healthy."""
    job = Job("fleet-nulls", machine_names("old", 16))
    _job(trace, job, base, {n: Agent(gpu=_old_driver) for n in job.nodes[8:]})
    return []


def nvml_blind(trace: Trace, base: float) -> list[Expect]:
    """The agent's NVML call on GPU 2 of one machine hangs at 300 s: that GPU leaves its samples (the
    others go on), the agent's beats say it is blind to it; the GPU's rank trains on, as does the job."""
    job = Job("fleet-blind", machine_names("nvb", 16))
    bad = job.nodes[5]

    def gpu(g: dict, t: float) -> dict | None:
        return None if g["index"] == 2 and t >= FAULT_AT else g

    def beat(t: float) -> dict:
        if t < FAULT_AT:
            return {}
        why = f"nvmlDeviceGetTotalEnergyConsumption on GPU 2 has not returned for {t - FAULT_AT + 10.0:.0f} s"
        return {
            "sources": {"nvml": why, "kernel": "ok", "nccl": "ok", "net": "ok"},
            "health": {
                "nvml": {
                    "state": "stuck",
                    "lag_s": round(t - FAULT_AT, 1),
                    "last_ok_ts": base + FAULT_AT,
                    "samples": int(FAULT_AT // 10),
                    "deadline_s": 10.0,
                    "unresponsive": {
                        "2": {"call": "nvmlDeviceGetTotalEnergyConsumption", "for_s": round(t - FAULT_AT + 10.0, 1)}
                    },
                    "abandoned_calls": 1,
                },
                "blind": [{"what": "nvml", "why": why}],
            },
        }

    _job(trace, job, base, {bad: Agent(gpu=gpu, beat_extra=beat)})
    return [_verdict(job.name, "agent_blind", [bad], "alert", base, FAULT_AT)]


def bursty_steps(trace: Trace, base: float) -> list[Expect]:
    """16 x 4 GPUs, healthy; the trainers' steps reach the broker in bursts (see `_in_bursts`)."""
    _job(trace, Job("fleet-bursty", machine_names("bst", 16)), base)
    return []


def _in_bursts(rows: list[dict]) -> list[dict]:
    """A slow broker and batched publishing: every 30 s of a trainer's steps arrive together at the
    end of their 30 s, each with the time it ended; the agents' records as they come."""

    def arrives(row: dict) -> float:
        return math.ceil(row["ts"] / 30.0) * 30.0 + 0.5 if row["kind"] == "step" else row["ts"]

    return sorted(rows, key=lambda r: (arrives(r), r["kind"] != "topology"))


def xid48_noise(trace: Trace, base: float) -> list[Expect]:
    """GPU 1 of one machine logs Xid 48 (a double-bit ECC error) at 300 s and counts it; its rank's
    CUDA call fails, the others' watchdogs see it gone, the trainers exit. Meanwhile two other
    machines count correctable (single-bit) errors the whole time, as healthy HBM does."""
    job = Job("fleet-xid48", machine_names("ecc", 16))
    bad, noisy = job.nodes[3], job.nodes[7:13:5]

    def dbe(g: dict, t: float) -> dict:
        if g["index"] == 1 and t >= FAULT_AT:
            g.update(ecc_dbe_volatile=1, ecc_dbe_aggregate=1, retired_pages_dbe=1, retired_pending=1)
        return g

    def sbe(g: dict, t: float) -> dict:
        if g["index"] in (0, 3):
            g.update(ecc_sbe_volatile=int(t // 20), ecc_sbe_aggregate=140 + int(t // 20))
        return g

    stop = FAULT_AT + 1.0
    trainers = [(0.0, stop + 40.0)]
    agents = {bad: Agent(gpu=dbe, training=trainers)} | {n: Agent(gpu=sbe, training=trainers) for n in noisy}
    agents |= {n: Agent(training=trainers) for n in job.nodes if n not in agents}
    _job(trace, job, base, agents, run=Steps(0.0, stop))
    t = base + FAULT_AT
    trace.kernel_line(
        t,
        job.name,
        bad,
        "NVRM: Xid (PCI:0000:2a:00): 48, pid=41031, name=python3, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the "
        "framebuffer at partition 3, subpartition 0.",
    )
    rank = next(r["rank"] for r in job.ranks if r["node"] == bad and r["tp"] == 1)
    trace.log_line(t + 0.3, job.name, bad, f"[rank{rank}]: RuntimeError: CUDA error: uncorrectable ECC error encountered")
    _exit_lines(
        trace,
        job,
        t + 20.0,
        "[PG 0 (default_pg) Rank {rank}] Process group watchdog thread terminated "
        "with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5",
        who=lambda r: r["node"] != bad,
    )
    return [_verdict(job.name, "gpu_memory", [bad], "evict_reset_gpu", base, FAULT_AT)]


def nic_wave(trace: Trace, base: float) -> list[Expect]:
    """One machine's fabric port goes down at 300 s and stays down. No step ends after; two minutes
    on every rank of the job, that machine's too, logs the same NCCL watchdog timeout, then the
    trainers exit. One machine to blame."""
    job = Job("fleet-nic-wave", machine_names("ibw", 16))
    bad = job.nodes[9]
    timeout = FAULT_AT + 120.0
    trainers = [(0.0, timeout + 15.0)]
    agents = {n: Agent(training=trainers, port_down=[(FAULT_AT, math.inf)] if n == bad else []) for n in job.nodes}
    _job(trace, job, base, agents, run=Steps(0.0, FAULT_AT))
    trace.kernel_line(base + FAULT_AT, job.name, bad, "mlx5_core 0000:c1:00.0 ibp193s0: Link down")
    _exit_lines(
        trace,
        job,
        base + timeout,
        "[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=48213, OpType=ALLREDUCE, NumelIn=50331648, NumelOut=50331648, "
        "Timeout(ms)=120000) ran for 120004 milliseconds before timing out.",
    )
    return [_verdict(job.name, "nic", [bad], "evict", base, FAULT_AT)]


def clock_ahead(trace: Trace, base: float) -> list[Expect]:
    """One machine's clock runs 90 s ahead: every stamp it writes, its ranks' steps too. Healthy."""
    job = Job("fleet-ahead", machine_names("ahd", 16))
    fast = job.nodes[10]
    _job(trace, job, base, {fast: Agent(skew=90.0)}, run=Steps(0.0, LENGTH, skew={fast: 90.0}))
    return []


def back_to_back(trace: Trace, base: float) -> list[Expect]:
    """Job A trains on 16 machines until 280 s, its trainers exit, the launcher says `job/end`, its
    agents are stopped one machine at a time without a last word; job B's agents start on the same
    machines one at a time from 320 s (some before A's last agent stopped), B trains from 380 s."""
    nodes = machine_names("b2b", 16)
    a, b = Job("fleet-first", nodes), Job("fleet-second", nodes)
    trace.emit(base, a.name, "-", "job", "topology", a.topology())
    steps(trace, a, base, Steps(0.0, 280.0))
    trace.emit(base + 284.0, a.name, "-", "job", "end", {"reason": "finished", "attempt": 0, "command_id": None, "nodes": nodes})
    trace.emit(base + 330.0, b.name, "-", "job", "topology", b.topology())
    for i, node in enumerate(nodes):
        agent(trace, a.name, node, i, base, Agent(end=300.0 + 4.0 * i, training=[(0.0, 281.0)]))
        agent(trace, b.name, node, i, base, Agent(start=320.0 + 3.0 * i, training=[(370.0, math.inf)]))
    steps(trace, b, base, Steps(375.0, LENGTH, step=0))
    return []


SCENARIOS: dict[str, Callable[[Trace, float], list[Expect]]] = {
    "mixed_fleet": mixed_fleet,
    "elastic": elastic,
    "nvml_nulls": nvml_nulls,
    "nvml_blind": nvml_blind,
    "bursty_steps": bursty_steps,
    "xid48_noise": xid48_noise,
    "nic_wave": nic_wave,
    "clock_ahead": clock_ahead,
    "back_to_back": back_to_back,
}


def write_all(out: Path, names: list[str] | None = None, combined: Path | None = None) -> list[Path]:
    """Each of ``names`` (default all) as a trace with its expect file, one after another in event
    time with a minute between (``combined``: all of them as one stream)."""
    written = write_scenarios(
        out,
        SCENARIOS,
        names,
        seed=700,
        combined=combined,
        deliver={"bursty_steps": _in_bursts},
        start=lambda i, k: START + k * (ELASTIC_LENGTH + 60.0),
    )
    return [out / f"{name}.parquet" for name in written]


def main(argv: list[str] | None = None) -> int:
    return writer_main(argv, __doc__, SCENARIOS, write_all, combined=True)


if __name__ == "__main__":
    sys.exit(main())
