"""Traces of other shapes, written from docs/events.md alone: the outside check's round 2 (helper O3).

    python -m tests.outside.stream_shapes OUT_DIR

Round 1 (tests/outside/write_traces.py) wrote one 16 x 4 GPU job a trace at a 2 s step, clean and
in order. These keep its telemetry (tests/outside/telemetry.py) and change the shape:

- shared_node: two jobs on 4 GPUs a machine that share one machine (job A on GPUs 0-3, job B on
  4-7, each job's agent reporting its own GPUs), A stepping at 10 Hz, B at 0.1 Hz; B hangs with its
  culprit on the shared machine while A trains on beside it (docs/events.md `train`/`step`,
  `stack`/`stack_dump`; the verdict is B's alone);
- standby_swap: a GPU falls off the bus (Xid 79, NVML lost) on one machine; the launcher restarts
  the job with a standby in its place (`job`/`restart` nodes_out / nodes_in, a new `job`/`topology`,
  docs/events.md `source job`); the old machine's agent beats on without training processes;
- late_topology: the same swap, the new topology read 20 s after the new incarnation's first
  telemetry (the `jobs` topic is read apart from the telemetry topics);
- at_least_once: the same fault, delivered as a consumer would see it from several partitions: a
  twentieth of the records twice (the same `id`, a few seconds later: at-least-once), every
  machine's records shifted against the others' by up to 4 s (each machine's own order kept, as
  a partition keeps its key's order), unknown keys on payloads and envelopes' `data`, and kinds
  the docs never list (`gpu`/`fabric_health`, `host`/`ipmi_sel`, `train`/`eval`), which must be
  dead letters or ignored, never a crash, never the loss of a good event.

Each trace's `NAME.parquet.expect.jsonl` says what a person expects from the docs alone.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import tests.outside.telemetry as telemetry
from tests.outside.job_shape import Job, Trace, machine_names
from tests.outside.telemetry import Knobs, write_job
from tests.outside.write_traces import _HEADER, _STUCK, _WAITING, write_case, write_table

START = 1_772_618_400.0      # 2026-03-04 10:00:00 UTC
LENGTH = 600.0
FAULT_AT = 300.0
SLACK = 60.0

Expect = dict


@contextmanager
def pace(step_s: float):
    """Round 1's telemetry steps every 2 s; these jobs step at another pace (compute a share alike)."""
    saved = telemetry.STEP_S, telemetry.COMPUTE_S
    telemetry.STEP_S, telemetry.COMPUTE_S = step_s, step_s * saved[1] / saved[0]
    try:
        yield
    finally:
        telemetry.STEP_S, telemetry.COMPUTE_S = saved


def _verdict(job: str, fault: str, nodes: list[str], action: str, base: float, first: float,
             last: float | None = None) -> Expect:
    return {"job": job, "fault": fault, "nodes": sorted(nodes), "action": action,
            "onset_from": base + first - SLACK, "onset_to": base + (last if last is not None else first) + SLACK}


def _gpus_from(trace: Trace, job: str, node: str, first: int) -> None:
    """Renumber one machine's GPUs of ``job`` from ``first`` (the job holds the machine's upper GPUs)."""
    for e in trace.events:
        if e["job"] == job and e["node"] == node and e["source"] == "gpu" and e["kind"] == "sample":
            data = json.loads(e["data"])
            for g in data["gpus"]:
                g["index"] += first
                g["uuid"] = g["uuid"][:-2] + f"{g['index']:02x}"
            e["data"] = json.dumps(data, separators=(",", ":"))


def shared_node(trace: Trace, base: float) -> list[Expect]:
    nodes = machine_names("hgx", 5)
    shared = nodes[3]
    a = Job("outside-shared-a", nodes[:4], tp=4, pp=1, dp=4)
    b = Job("outside-shared-b", [shared, nodes[4]], tp=4, pp=1, dp=2)
    with pace(0.1):
        write_job(trace, a, base, LENGTH, Knobs())
    with pace(10.0):
        write_job(trace, b, base, LENGTH, Knobs(steps_stop=FAULT_AT))
    _gpus_from(trace, b.name, shared, 4)
    stuck = next(r["rank"] for r in b.ranks if r["node"] == shared)
    at = base + FAULT_AT + 70.0     # the capture the suspicion asks for (a minute of no step) answered
    for r in b.ranks:
        pid = 41_000 + 10 * b.nodes.index(r["node"]) + r["tp"]
        trace.emit(at + 0.05 * r["rank"], b.name, r["node"], "stack", "stack_dump",
                   {"rank": r["rank"], "pid": pid, "tool": "py-spy", "ok": True, "request_id": "shared-b-1",
                    "rank_env": "RANK", "dump": _HEADER.format(pid=pid) + (_STUCK if r["rank"] == stuck else _WAITING)})
    return [_verdict(b.name, "job_hang", [shared], "evict", base, FAULT_AT, FAULT_AT + 70)]


def _xid79(trace: Trace, job: Job, base: float, bad: str) -> None:
    t = base + FAULT_AT
    trace.kernel_line(t, job.name, bad, "NVRM: Xid (PCI:0000:41:00): 79, pid=41052, name=python3, "
                                        "GPU has fallen off the bus.")
    trace.emit(t + 0.5, job.name, bad, "gpu", "lost",
               {"gpu": 2, "error": "NVML_ERROR_GPU_IS_LOST", "fault": "gpu_lost", "action": "evict"})


def _swapped(trace: Trace, base: float, name: str) -> tuple[Job, str]:
    """8 x 4 GPUs; GPU 2 of machine 5 falls off the bus at minute 5, the job stops; 60 s later the
    launcher restarts it on machines 0-4, 6-7 and the standby, which take the same ranks."""
    nodes = machine_names("hgx", 8)
    bad, spare = nodes[5], "hgx-r9-01"
    job = Job(name, nodes, tp=4, pp=1, dp=8)
    restart = FAULT_AT + 60.0
    # The trainers exit 5 s after the GPU is lost; every agent beats on (no training process).
    write_job(trace, job, base, restart, Knobs(steps_stop=FAULT_AT, trainers_exit=FAULT_AT + 5.0,
                                               lost_gpu=(bad, 2, FAULT_AT)))
    _xid79(trace, job, base, bad)
    after = Job(name, [spare if n == bad else n for n in nodes], tp=4, pp=1, dp=8)
    trace.emit(base + restart, name, "-", "job", "restart",
               {"reason": "evict", "command_id": None, "nodes_out": [bad], "nodes_in": [spare], "attempt": 1,
                "resume": "latest"})
    resumed = Trace(seed=7)
    write_job(resumed, after, base + restart, LENGTH - restart, Knobs())
    trace.events += resumed.events
    # The evicted machine's agent runs on, its trainers gone (docs/events.md: a beat with no pids).
    for k in range(int((LENGTH - restart) / 5)):
        trace.emit(base + restart + 1.0 + 5 * k, name, bad, "heartbeat", "beat",
                   {"seq": 1000 + k, "pids": [], "sources": {"nvml": "ok", "kernel": "ok", "nccl": "ok", "net": "ok"}})
    return job, bad


def standby_swap(trace: Trace, base: float) -> list[Expect]:
    job, bad = _swapped(trace, base, "outside-standby")
    return [_verdict(job.name, "gpu_lost", [bad], "evict", base, FAULT_AT)]


UNKNOWN_KINDS = (("gpu", "fabric_health", {"state": "degraded?", "gpus": [0, 1]}),
                 ("host", "ipmi_sel", {"record": "0x1a", "sensor": "PSU2"}),
                 # train/eval became a kind (held-out metrics); a trainer's profile summary is none
                 ("train", "profile", {"rank": 0, "step": 12_050, "tflops": 312.5}))


def at_least_once(trace: Trace, base: float) -> list[Expect]:
    job, bad = _swapped(trace, base, "outside-at-least-once")
    rng = random.Random(54)
    for e in trace.events:
        data = json.loads(e["data"])
        if isinstance(data, dict) and rng.random() < 0.1:
            data["x_vendor"] = {"agent": "acme-node-exporter/3.2", "labels": ["a", "b"]}
            e["data"] = json.dumps(data, separators=(",", ":"))
    for node in job.nodes:
        for k in range(20):
            source, kind, data = UNKNOWN_KINDS[k % len(UNKNOWN_KINDS)]
            trace.emit(base + 15.0 + 29.0 * k, job.name, node, source, kind, data)
    return [_verdict(job.name, "gpu_lost", [bad], "evict", base, FAULT_AT)]


def late_topology(trace: Trace, base: float) -> list[Expect]:
    """The standby swap with the new `job`/`topology` read 20 s after the new incarnation's first
    telemetry: the `jobs` topic is not the telemetry topics, and nothing orders one against the
    other. The standby's ranks report from a machine the old topology does not hold meanwhile."""
    job, bad = _swapped(trace, base, "outside-late-topology")
    return [_verdict(job.name, "gpu_lost", [bad], "evict", base, FAULT_AT)]


def _topology_late(rows: list[dict], delay: float = 20.0) -> list[dict]:
    topologies = [r for r in rows if (r["source"], r["kind"]) == ("job", "topology")]
    late = topologies[-1]
    rest = [r for r in rows if r is not late]
    at = next(i for i, r in enumerate(rest) if r["ts"] > late["ts"] + delay)
    return rest[:at] + [late] + rest[at:]


def delivered(rows: list[dict], seed: int = 5) -> list[dict]:
    """Rows as several partitions deliver them: each machine's rows shifted by its own lag of 0-4 s
    (its order kept; job records keyed by job stay first), a twentieth sent twice, 1-6 s later."""
    rng = random.Random(seed)
    lag = {n: rng.uniform(0.0, 4.0) for n in sorted({r["node"] for r in rows})}
    lag["-"] = 0.0
    out = [(r["ts"] + lag[r["node"]], i, r) for i, r in enumerate(rows)]
    out += [(r["ts"] + lag[r["node"]] + rng.uniform(1.0, 6.0), len(rows) + i, r)
            for i, r in enumerate(rows) if r["node"] != "-" and rng.random() < 0.05]
    return [r for _, _, r in sorted(out, key=lambda x: (x[0], x[1]))]


def outage(path: Path, gap_s: float = 40.0) -> Path:
    """A healthy 8 x 4 GPU job whose every record from minute 5 on is lost for ``gap_s`` (the
    telemetry pipeline down, the agents' spools lost): then each agent's beats resume on its own
    phase (up to 5 s apart), as after any outage. A person expects nothing of it (kept out of
    SCENARIOS: test_outside_streams checks it names no silent node)."""
    trace = Trace(seed=13)
    base = START + len(SCENARIOS) * LENGTH
    write_job(trace, Job("outside-outage", machine_names("hgx", 8), tp=4, pp=1, dp=8), base, LENGTH, Knobs())
    rows = [r for r in trace.rows() if not (base + FAULT_AT <= r["ts"] < base + FAULT_AT + gap_s)]
    write_table(rows, path)
    return path


SCENARIOS: dict[str, Callable[[Trace, float], list[Expect]]] = {
    "shared_node": shared_node, "standby_swap": standby_swap, "at_least_once": at_least_once,
    "late_topology": late_topology,
}
# How the rows reach the reader when not in event-time order (the file's order is the delivery's).
DELIVERY: dict[str, Callable[[list[dict]], list[dict]]] = {"at_least_once": delivered,
                                                           "late_topology": _topology_late}


def write_all(out: Path, names: list[str] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, (name, scenario) in enumerate(SCENARIOS.items()):
        if names and name not in names:
            continue
        trace = Trace(seed=200 + i)
        base = START + i * LENGTH
        expected = scenario(trace, base)
        rows = trace.rows()
        if name in DELIVERY:
            rows = DELIVERY[name](rows)
        path = out / f"{name}.parquet"
        write_case(rows, path, expected)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="*", help=f"some of {', '.join(SCENARIOS)} (default all)")
    args = parser.parse_args(argv)
    for path in write_all(args.out, args.names or None):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
