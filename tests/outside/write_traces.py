"""Write the outside check's traces and, beside each, the verdicts a user expects of it.

    python -m tests.outside.write_traces OUT_DIR [--combined FILE]

Written by a third party from docs/events.md, docs/design.md and docs/replay_tests.md alone: a
16 x 4 GPU job (tests/outside/job_shape.py) with one fault a trace, 10 minutes each, the traces
one after another in event time, so `--combined` is the same events as one 80-minute stream (a
backlog read after the fact, or what several jobs in a row look like live).

Each `NAME.parquet.expect.jsonl` says what a person expects from the docs (design.md §3's first
actions, §1's "evidence before eviction"), not what the engine printed: `faultlens check` then
shows every place the two disagree.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from tests.outside.job_shape import SWITCHES, Job, Trace, machine_names
from tests.outside.telemetry import Knobs, write_job

START = 1_772_445_600.0      # 2026-03-02 10:00:00 UTC
LENGTH = 600.0
SLACK = 60.0
FAULT_AT = 300.0

Expect = dict
Scenario = Callable[[Trace, float], list[Expect]]
R = TypeVar("R")


def _same(result):
    return result


def _verdict(job: str, fault: str, nodes: list[str], action: str, base: float,
             first: float, last: float | None = None) -> Expect:
    return {"job": job, "fault": fault, "nodes": sorted(nodes), "action": action,
            "onset_from": base + first - SLACK, "onset_to": base + (last if last is not None else first) + SLACK}


def healthy(trace: Trace, base: float) -> list[Expect]:
    write_job(trace, Job("outside-healthy", machine_names("hgx", 16)), base, LENGTH, Knobs())
    return []


def xid79(trace: Trace, base: float) -> list[Expect]:
    """GPU 2 of one machine falls off the bus: NVML loses it, the kernel logs Xid 79, the job's
    other ranks report the dead peer and the trainers exit; the agents keep beating."""
    job = Job("outside-xid79", machine_names("hgx", 16))
    bad = job.nodes[5]
    write_job(trace, job, base, LENGTH, Knobs(steps_stop=FAULT_AT, trainers_exit=FAULT_AT + 40,
                                              lost_gpu=(bad, 2, FAULT_AT)))
    t = base + FAULT_AT
    trace.kernel_line(t, job.name, bad, "NVRM: Xid (PCI:0000:41:00): 79, pid=41052, name=python3, "
                                        "GPU has fallen off the bus.")
    trace.kernel_line(t + 0.001, job.name, bad, "NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.")
    trace.emit(t + 0.5, job.name, bad, "gpu", "lost",
               {"gpu": 2, "error": "NVML_ERROR_GPU_IS_LOST", "fault": "gpu_lost", "action": "evict"})
    for r in job.ranks:
        if r["node"] != bad:
            trace.log_line(t + 25 + 0.01 * r["rank"], job.name, r["node"],
                           f"[rank{r['rank']}]:[E302 10:05:25.{r['rank']:06d} ProcessGroupNCCL.cpp:1505] "
                           f"[PG 0 (default_pg) Rank {r['rank']}] Process group watchdog thread terminated "
                           "with exception: NCCL error: remote process exited or there was a network error, "
                           "NCCL version 2.21.5")
    return [_verdict(job.name, "gpu_lost", [bad], "evict", base, FAULT_AT)]


def nic_flap(trace: Trace, base: float) -> list[Expect]:
    """One machine's fabric port goes down and up four times in three minutes."""
    job = Job("outside-nic-flap", machine_names("hgx", 16))
    bad = job.nodes[9]
    downs = [FAULT_AT + 60.0 * i for i in range(4)]
    write_job(trace, job, base, LENGTH, Knobs(pauses=[(d, d + 8.0) for d in downs],
                                              port_down={bad: [(d, d + 8.0) for d in downs]}))
    for d in downs:
        trace.kernel_line(base + d, job.name, bad, "mlx5_core 0000:c1:00.0 ibp193s0: Link down")
        trace.kernel_line(base + d + 8.0, job.name, bad, "mlx5_core 0000:c1:00.0 ibp193s0: Link up")
    return [_verdict(job.name, "nic", [bad], "evict", base, FAULT_AT, FAULT_AT + 60)]


_HEADER = "Process {pid}: /usr/bin/python3 -u pretrain_gpt.py --tensor-model-parallel-size 4\n" \
          "Python v3.11.9 (/usr/bin/python3.11)\n\nThread {pid} (active): \"MainThread\"\n"
_WAITING = ("    wait (torch/distributed/distributed_c10d.py:2501)\n"
            "    all_reduce (torch/distributed/distributed_c10d.py:2519)\n"
            "    wrapper (torch/distributed/c10d_logger.py:83)\n"
            "    finish_grad_sync (megatron/core/distributed/distributed_data_parallel.py:412)\n"
            "    train_step (megatron/training/training.py:750)\n"
            "    train (megatron/training/training.py:1180)\n"
            "    pretrain (megatron/training/training.py:361)\n"
            "    <module> (pretrain_gpt.py:240)\n")
_STUCK = ("    _read_into (megatron/core/datasets/indexed_dataset.py:118)\n"
          "    __getitem__ (megatron/core/datasets/gpt_dataset.py:190)\n"
          "    fetch (torch/utils/data/_utils/fetch.py:52)\n"
          "    _next_data (torch/utils/data/dataloader.py:674)\n"
          "    get_batch (pretrain_gpt.py:101)\n"
          "    forward_step (pretrain_gpt.py:152)\n"
          "    train_step (megatron/training/training.py:731)\n"
          "    train (megatron/training/training.py:1180)\n"
          "    pretrain (megatron/training/training.py:361)\n"
          "    <module> (pretrain_gpt.py:240)\n")


def hang(trace: Trace, base: float) -> list[Expect]:
    """Rank 37 hangs reading its data; every other rank waits in the gradient all-reduce. Every
    node agent dumps its ranks' stacks with py-spy 80 s later (what a capture_stacks gets)."""
    job = Job("outside-hang", machine_names("hgx", 16))
    stuck = 37
    write_job(trace, job, base, LENGTH, Knobs(steps_stop=FAULT_AT))
    at = base + FAULT_AT + 80.0
    for r in job.ranks:
        pid = 41_000 + 10 * job.nodes.index(r["node"]) + r["tp"]
        trace.emit(at + 0.05 * r["rank"], job.name, r["node"], "stack", "stack_dump",
                   {"rank": r["rank"], "pid": pid, "tool": "py-spy", "ok": True,
                    "request_id": "outside-hang-capture-1", "rank_env": "RANK",
                    "dump": _HEADER.format(pid=pid) + (_STUCK if r["rank"] == stuck else _WAITING)})
    return [_verdict(job.name, "job_hang", [job.node_of(stuck)], "evict", base, FAULT_AT, FAULT_AT + 80)]


_COMPUTING = ("    _flash_attn_forward (flash_attn/flash_attn_interface.py:91)\n"
              "    forward (megatron/core/transformer/dot_product_attention.py:166)\n"
              "    forward (megatron/core/transformer/transformer_layer.py:302)\n"
              "    forward_step (pretrain_gpt.py:160)\n"
              "    train_step (megatron/training/training.py:731)\n"
              "    train (megatron/training/training.py:1180)\n"
              "    pretrain (megatron/training/training.py:361)\n"
              "    <module> (pretrain_gpt.py:240)\n")


def _stack_round(trace: Trace, job: Job, at: float, request: str, computing: set[str]) -> None:
    """Every rank's py-spy dump for one capture: the machines in ``computing`` still in their
    forward pass, everyone else already waiting in the gradient all-reduce."""
    for r in job.ranks:
        pid = 41_000 + 10 * job.nodes.index(r["node"]) + r["tp"]
        trace.emit(at + 0.05 * r["rank"], job.name, r["node"], "stack", "stack_dump",
                   {"rank": r["rank"], "pid": pid, "tool": "py-spy", "ok": True, "request_id": request,
                    "rank_env": "RANK",
                    "dump": _HEADER.format(pid=pid) + (_COMPUTING if r["node"] in computing else _WAITING)})


def slow_node(trace: Trace, base: float) -> list[Expect]:
    """One machine computes 30 % slower from minute 3 on; the whole job's steps slow with it. The
    agents answer five stack captures 10 s apart (what remediation's fail-slow rounds ask for):
    each time the slow machine's ranks are still computing while every other rank waits. Its GPUs'
    counters stay like its peers' and the trace holds one look: an alert naming it, no eviction on
    stacks alone (diagnosis.peers.slow_evidence: hardware apart, or the same machine over 20 min)."""
    job = Job("outside-slow", machine_names("hgx", 16))
    bad = job.nodes[12]
    write_job(trace, job, base, LENGTH, Knobs(slow_node=bad, slow_from=180.0))
    for k in range(5):
        _stack_round(trace, job, base + 270.0 + 10.0 * k, f"outside-slow-round-{k + 1}", {bad})
    return [_verdict(job.name, "fail_slow", [bad], "alert", base, 180.0, 320.0)]


def nan_loss(trace: Trace, base: float) -> list[Expect]:
    job = Job("outside-nan", machine_names("hgx", 16))
    write_job(trace, job, base, LENGTH, Knobs(nan_from=FAULT_AT))
    return [_verdict(job.name, "nan_loss", [], "stop_time_diagnosis", base, FAULT_AT)]


def job_quiet(trace: Trace, base: float) -> list[Expect]:
    """Everything of one job stops at once (its telemetry lost upstream); a second, small job on
    other machines goes on reporting, so event time moves past the silence."""
    job = Job("outside-quiet", machine_names("hgx", 16))
    other = Job("outside-quiet-neighbour", machine_names("dgx", 4), tp=4, pp=1, dp=4)
    write_job(trace, job, base, LENGTH, Knobs(quiet_from=FAULT_AT))
    write_job(trace, other, base, LENGTH, Knobs())
    return [_verdict(job.name, "telemetry_lost", [], "alert", base, FAULT_AT, FAULT_AT + 60)]


def switch_wave(trace: Trace, base: float) -> list[Expect]:
    """The leaf switch under machines 0-7 reboots: each of them logs its port down and up 18 s
    later; the job stalls for those seconds and goes on. One finding, about the switch."""
    job = Job("outside-switch", machine_names("hgx", 16))
    under = [n for n in job.nodes if job.machines[n]["ib_switch"] == SWITCHES[0]]
    spans = {n: [(FAULT_AT + 0.4 * i, FAULT_AT + 18.0 + 0.4 * i)] for i, n in enumerate(under)}
    write_job(trace, job, base, LENGTH, Knobs(pauses=[(FAULT_AT, FAULT_AT + 21.0)], port_down=spans))
    for n, [(down, up)] in spans.items():
        trace.kernel_line(base + down, job.name, n, "mlx5_core 0000:c1:00.0 ibp193s0: Link down")
        trace.kernel_line(base + up, job.name, n, "mlx5_core 0000:c1:00.0 ibp193s0: Link up")
    return [_verdict(job.name, "nic", [], "alert", base, FAULT_AT)]


SCENARIOS: dict[str, Scenario] = {
    "healthy": healthy, "xid79": xid79, "nic_flap": nic_flap, "hang": hang, "slow_node": slow_node,
    "nan_loss": nan_loss, "job_quiet": job_quiet, "switch_wave": switch_wave,
}


def write_table(rows: list[dict], path: Path) -> None:
    schema = pa.schema([("v", pa.int32()), ("id", pa.string()), ("ts", pa.float64()), ("job", pa.string()),
                        ("node", pa.string()), ("source", pa.string()), ("kind", pa.string()),
                        ("data", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, compression="zstd")


def write_case(rows: list[dict], path: Path, expected: list[dict]) -> None:
    """A trace and its expect file beside it (docs/replay_tests.md), as a user writes them."""
    write_table(rows, path)
    header = {"faultlens_expect": 1, "trace": path.name, "onset_slack_s": SLACK}
    lines = [json.dumps(header)] + [json.dumps(v, sort_keys=True) for v in expected]
    Path(f"{path}.expect.jsonl").write_text("\n".join(lines) + "\n")


def write_scenarios(out: Path, scenarios: Mapping[str, Callable[[Trace, float], R]], names: Iterable[str] | None, *,
                    seed: int, start: Callable[[int, int], float], expect: Callable[[R], list[Expect]] = _same,
                    deliver: Mapping[str, Callable[[list[dict]], list[dict]]] | None = None,
                    combined: Path | None = None) -> dict[str, R]:
    """Each of ``names`` (default all) of ``scenarios`` as a trace with its expect file, in the
    scenarios' order: scenario number i (counted over all of them) writes into ``Trace(seed=seed +
    i)`` from event time ``start(i, k)``, k the traces written before it; its result's
    ``expect(result)`` is the expect file; ``deliver[name]`` reorders its rows as a delivery did.
    ``combined``: every trace's rows as one stream too. The outside writers' one loop (this module,
    sre_shapes, slow_shapes, dump_shapes, peer_inputs): returns each written scenario's result."""
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(names) if names else None
    written: dict[str, R] = {}
    everything: list[dict] = []
    for i, (name, scenario) in enumerate(scenarios.items()):
        if wanted is not None and name not in wanted:
            continue
        trace = Trace(seed=seed + i)
        result = scenario(trace, start(i, len(written)))
        rows = trace.rows()
        if deliver and name in deliver:
            rows = deliver[name](rows)
        write_case(rows, out / f"{name}.parquet", expect(result))
        written[name] = result
        everything.extend(rows)
    if combined is not None:
        write_table(sorted(everything, key=lambda e: (e["ts"], e["kind"] != "topology")), combined)
    return written


def write_all(out: Path, names: list[str] | None = None, combined: Path | None = None,
              packed: bool = False) -> list[Path]:
    """Each of ``names`` (default all) as a trace with its expect file, in SCENARIOS' order; each
    starts at its place among all eight, or, ``packed``, right after the one written before it
    (a subset's combined stream then has no stretch where no job reports)."""
    written = write_scenarios(out, SCENARIOS, names, seed=1, combined=combined,
                              start=lambda i, k: START + (k if packed else i) * LENGTH)
    return [out / f"{name}.parquet" for name in written]


def writer_main(argv: list[str] | None, doc: str, names: Iterable[str], write: Callable[..., Iterable[object]],
                combined: bool = False, packed: bool = False) -> int:
    """The outside writers' command line: OUT_DIR [NAME ...], with --combined and --packed where
    the writer takes them; prints each trace written."""
    known = list(names)
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="*", help=f"some of {', '.join(known)} (default all)")
    if combined:
        parser.add_argument("--combined", type=Path, help="also write every trace as one stream here")
    if packed:
        parser.add_argument("--packed", action="store_true",
                            help="each trace right after the one before it (no gap where a trace left out would be)")
    args = parser.parse_args(argv)
    unknown = set(args.names) - set(known)
    if unknown:
        parser.error(f"no such trace: {', '.join(sorted(unknown))}")
    options = {k: getattr(args, k) for k, on in (("combined", combined), ("packed", packed)) if on}
    for written in write(args.out, args.names or None, **options):  # paths, or the scenarios' names
        print(written if isinstance(written, Path) else args.out / f"{written}.parquet")
    return 0


def main(argv: list[str] | None = None) -> int:
    return writer_main(argv, __doc__, SCENARIOS, write_all, combined=True, packed=True)


if __name__ == "__main__":
    sys.exit(main())
