"""Stack dumps for tests and benches, written in the exact layout of `py-spy dump` and faulthandler.

The layouts were checked against real output of py-spy 0.3 / CPython 3.11 faulthandler on this
machine. Frames are (function, file, line), innermost first, as both tools print them. Megatron-
style call paths give the Fig. 7 case of the ByteRobust paper: the optimizer's gradient sync on
healthy ranks, isend/irecv on the pipeline peers of a rank stuck in all_gather_into_tensor.
"""

from __future__ import annotations

import random
from typing import Mapping

from faultlens.events.topology import Topology

Frames = list[tuple[str, str, int]]

BASE: Frames = [
    ("train_step", "megatron/training/training.py", 720),
    ("train", "megatron/training/training.py", 1150),
    ("pretrain", "megatron/training/training.py", 280),
    ("<module>", "pretrain_gpt.py", 320),
]
C10D = "torch/distributed/distributed_c10d.py"
P2P = "megatron/core/pipeline_parallel/p2p_communication.py"
SCHED = "megatron/core/pipeline_parallel/schedules.py"

GRAD_SYNC: Frames = [
    ("reduce_scatter_tensor", C10D, 3350),
    ("wrapper", "torch/distributed/c10d_logger.py", 83),
    ("_reduce_grads", "megatron/core/distributed/param_and_grad_buffer.py", 410),
    ("finish_grad_sync", "megatron/core/distributed/distributed_data_parallel.py", 300),
    ("step", "megatron/core/optimizer/optimizer.py", 450),
] + BASE


def _p2p(op: str, caller: str) -> Frames:
    return [
        (op, C10D, 1700 if op == "isend" else 1745),
        ("_batched_p2p_ops", P2P, 120),
        ("_communicate", P2P, 300),
        (caller, P2P, 410),
        ("forward_backward_pipelining_without_interleaving", SCHED, 1200),
    ] + BASE


PP_SEND: Frames = _p2p("isend", "send_forward")
PP_RECV: Frames = _p2p("irecv", "recv_backward")

STUCK_ALL_GATHER: Frames = [
    ("all_gather_into_tensor", C10D, 2876),
    ("wrapper", "torch/distributed/c10d_logger.py", 83),
    ("_gather_along_first_dim", "megatron/core/tensor_parallel/mappings.py", 250),
    ("forward", "megatron/core/tensor_parallel/layers.py", 800),
    ("_call_impl", "torch/nn/modules/module.py", 1520),
    ("_wrapped_call_impl", "torch/nn/modules/module.py", 1511),
    ("forward_step", SCHED, 190),
    ("forward_backward_pipelining_without_interleaving", SCHED, 1200),
] + BASE

# A degraded GPU is still computing while its peers already wait in the collective.
SLOW_COMPUTE: Frames = [
    ("linear", "torch/nn/functional.py", 0),
    ("forward", "megatron/core/tensor_parallel/layers.py", 760),
    ("_call_impl", "torch/nn/modules/module.py", 1520),
    ("_wrapped_call_impl", "torch/nn/modules/module.py", 1511),
    ("forward_step", SCHED, 190),
    ("forward_backward_pipelining_without_interleaving", SCHED, 1200),
] + BASE

LOADER: Frames = [
    ("wait", "threading.py", 320),
    ("get", "queue.py", 171),
    ("_worker_loop", "torch/utils/data/_utils/pin_memory.py", 52),
    ("run", "threading.py", 982),
    ("_bootstrap_inner", "threading.py", 1045),
    ("_bootstrap", "threading.py", 1002),
]
LISTENER: Frames = [
    ("dump_traceback", "faulthandler.py", 0),
    ("_capture", "trainer_hooks/commands.py", 88),
    ("_listen", "trainer_hooks/commands.py", 60),
    ("run", "threading.py", 982),
    ("_bootstrap_inner", "threading.py", 1045),
    ("_bootstrap", "threading.py", 1002),
]


def _pyspy_thread(tid: int, status: str, name: str, frames: Frames, locals_: bool) -> list[str]:
    out = [f'Thread {tid} ({status}): "{name}"']
    for fn, file, line in frames:
        qual = f"Thread.{fn}" if file == "threading.py" and fn in ("run", "_bootstrap", "_bootstrap_inner") else fn
        out.append(f"    {qual} ({file}:{line})")
        if locals_:
            out += ["        Arguments:", f"            self: <Thread at 0x7f{tid:010x}>", "        Locals:", f"            n: {tid % 97}"]
    return out


def pyspy_dump(frames: Frames, *, pid: int = 4242, loader: bool = True, locals_: bool = False, line_shift: int = 0) -> str:
    """A `py-spy dump` of a trainer: MainThread on ``frames`` plus, optionally, a pin-memory thread."""
    shifted = [(fn, file, line + line_shift if file.startswith("megatron") else line) for fn, file, line in frames]
    lines = [
        f"Process {pid}: /usr/bin/python3.11 -u pretrain_gpt.py --tensor-model-parallel-size 2",
        "Python v3.11.7 (/usr/bin/python3.11)",
        "",
    ]
    lines += _pyspy_thread(pid, "active+gil" if frames is SLOW_COMPUTE else "idle", "MainThread", shifted, locals_)
    if loader:
        lines += _pyspy_thread(pid + 7, "idle", "Thread-3 (_pin_memory_loop)", LOADER, locals_)
    return "\n".join(lines) + "\n"


def faulthandler_dump(frames: Frames, *, site: str = "/usr/lib/python3.11/site-packages") -> str:
    """What the trainer hook writes: all threads, the dumping listener as 'Current thread', absolute paths."""

    def path(file: str) -> str:
        if file.startswith(("torch/", "megatron/")):
            return f"{site}/{file}"
        if file in ("threading.py", "queue.py", "faulthandler.py"):
            return f"/usr/lib/python3.11/{file}"
        return f"/workspace/{file}"

    def block(head: str, fs: Frames) -> list[str]:
        return [head] + [f'  File "{path(file)}", line {line} in {fn}' for fn, file, line in fs]

    lines = block("Current thread 0x00007f3a9d7fe6c0 (most recent call first):", LISTENER)
    lines += [""] + block("Thread 0x00007f3aa1fff6c0 (most recent call first):", LOADER)
    lines += [""] + block("Thread 0x00007f3b2c8a1740 (most recent call first):", frames)
    return "\n".join(lines) + "\n"


def fig7_dumps(topology: Topology, stuck_rank: int, *, seed: int = 0, tool: str = "py-spy") -> dict[int, str]:
    """Fig. 7: ``stuck_rank`` in all_gather, its pipeline peers in isend/irecv, everyone else in grad sync.

    Healthy ranks vary in pid, locals and the pin-memory thread, as real dumps do.
    """
    rng = random.Random(seed)
    place = topology.by_rank[stuck_rank]
    dumps: dict[int, str] = {}
    for p in topology.ranks:
        if p.rank == stuck_rank:
            frames = STUCK_ALL_GATHER
        elif p.tp == place.tp and p.dp == place.dp:
            frames = PP_SEND if p.pp < place.pp else PP_RECV
        else:
            frames = GRAD_SYNC
        if tool == "faulthandler":
            dumps[p.rank] = faulthandler_dump(frames)
        else:
            dumps[p.rank] = pyspy_dump(frames, pid=1000 + p.rank, loader=rng.random() < 0.8, locals_=rng.random() < 0.2)
    return dumps


PP_RECV_FORWARD: Frames = _p2p("irecv", "recv_forward")
# Megatron's overlapped grad sync: a stage reduces over DP right after its last backward.
OVERLAP_GRAD_SYNC: Frames = [
    ("all_reduce", C10D, 2501),
    ("wrapper", "torch/distributed/c10d_logger.py", 83),
    ("start_grad_sync", "megatron/core/distributed/param_and_grad_buffer.py", 373),
    ("backward_step", SCHED, 370),
    ("forward_backward_pipelining_without_interleaving", SCHED, 1200),
] + BASE


def spread_hang_dumps(topology: Topology, culprit: int) -> dict[int, str]:
    """A hang minutes old, shaped like the real gloo captures (tests/fixtures/stacks/*overlap*).

    ``culprit`` computes; its TP peers wait for it in a TP all_gather; in its pipelines the
    earlier stages block in send_forward and the later ones in recv_forward; every other
    pipeline's last stage waits in the overlapped DP grad sync and its other stages in
    recv_backward. No stack holds a majority: the vote cannot name the culprit, the chains can.
    """
    place = topology.by_rank[culprit]
    dumps: dict[int, str] = {}
    for p in topology.ranks:
        if p.rank == culprit:
            frames = SLOW_COMPUTE
        elif p.dp == place.dp and p.pp == place.pp:
            frames = STUCK_ALL_GATHER
        elif p.dp == place.dp:
            frames = PP_SEND if p.pp < place.pp else PP_RECV_FORWARD
        else:
            frames = OVERLAP_GRAD_SYNC if p.pp == topology.pp - 1 else PP_RECV
        dumps[p.rank] = pyspy_dump(frames, pid=3000 + p.rank, loader=p.rank % 3 == 0)
    return dumps


def outlier_dumps(topology: Topology, outliers: Mapping[int, Frames], *, healthy: Frames = GRAD_SYNC) -> dict[int, str]:
    """Every rank on ``healthy`` except the given ones."""
    return {p.rank: pyspy_dump(outliers.get(p.rank, healthy), pid=2000 + p.rank) for p in topology.ranks}


def grid(nodes: int, gpus: int, tp: int, pp: int, dp: int) -> Topology:
    return Topology.grid([f"n{i:03d}" for i in range(nodes)], gpus, tp, pp, dp)


# --- events for the detector tests -------------------------------------------------------------
T0 = 1767225600.0
JOB = "job-s"
_seq = [0]


def _id(prefix: str) -> str:
    _seq[0] += 1
    return f"{prefix}{_seq[0]}"


def event(ts: float, node: str, source: str, kind: str, job: str = JOB, **data):
    from faultlens.events.envelope import Envelope

    return Envelope(ts=T0 + ts, job=job, node=node, source=source, kind=kind, data=data, id=_id(kind))


def step_event(ts: float, topology: Topology, rank: int, n: int, step_time_s: float = 2.0, job: str = JOB):
    return event(ts, topology.by_rank[rank].node, "train", "step", job=job, rank=rank, step=n, loss=2.0,
                 grad_norm=1.0, step_time_s=step_time_s, tokens=4096, tokens_per_s=2048.0, mfu=0.4)


def beat_event(ts: float, node: str, pids: list[int] | None = None, job: str = JOB):
    return event(ts, node, "heartbeat", "beat", job=job, seq=int(ts), pids=[1234] if pids is None else pids,
                 sources={"nvml": "ok"})


def stack_event(ts: float, topology: Topology, rank: int, dump: str, *, tool: str = "py-spy",
                request_id: str | None = None, job: str = JOB):
    data = {"rank": rank, "pid": 1000 + rank, "dump": dump, "tool": tool}
    if request_id is not None:
        data["request_id"] = request_id
    return event(ts, topology.by_rank[rank].node, "stack", "stack_dump", job=job, **data)


def run_detector(det, events, *, start: float = 0.0, until: float, diagnoses=()):
    """Feed events (and other detectors' diagnoses) in time order, ticking every second of event
    time from T0 + start to T0 + until, as the engine does; returns what the detector emitted."""
    out = []
    pending = sorted(diagnoses, key=lambda d: d.ts)
    events = sorted(events, key=lambda e: e.ts)
    i = 0
    t = T0 + start
    while t <= T0 + until:
        while pending and pending[0].ts <= t:
            out += det.observe_diagnosis(pending.pop(0))
        while i < len(events) and events[i].ts <= t:
            out += det.observe(events[i])
            i += 1
        out += det.tick(t)
        t += 1.0
    return out
