"""What the simulated cluster looks like: size, parallel layout, rates, seed.

Defaults follow a large-model pretraining job: 8 GPUs per node with TP inside the node, a 10 s
step (realistic for LLMs at scale), NVML sampled every second, heartbeats every 5 s.
"""

from __future__ import annotations

from dataclasses import dataclass

# 2026-01-01T00:00:00Z: a fixed start so the same seed gives the same trace, byte for byte.
DEFAULT_START_TS = 1767225600.0


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int


def choose_layout(nodes: int, gpus: int, tp: int | None = None, pp: int | None = None,
                  dp: int | None = None) -> Layout:
    """TP = GPUs per node unless given, then PP up to 4 stages, DP fills the rest of the job.

    Any given value is kept; the product must equal ``nodes * gpus`` or this raises ValueError
    with the sizes, so a bad ``--tp/--pp/--dp`` is a clear error, not a silent re-layout.
    """
    world = nodes * gpus
    if nodes < 1 or gpus < 1:
        raise ValueError(f"need at least one node and one GPU (got {nodes} nodes × {gpus} GPUs)")
    tp = tp or gpus
    if world % tp:
        raise ValueError(f"tp={tp} does not divide the {world} ranks of {nodes} nodes × {gpus} GPUs")
    rest = world // tp
    if pp is None and dp is None:
        pp = next(p for p in (4, 2, 1) if rest % p == 0)
    if pp is None:
        pp = rest // dp if dp and rest % dp == 0 else 0
    if dp is None:
        dp = rest // pp if pp and rest % pp == 0 else 0
    if tp * pp * dp != world:
        raise ValueError(f"tp*pp*dp = {tp}*{pp}*{dp} != {world} ranks ({nodes} nodes × {gpus} GPUs)")
    return Layout(tp, pp, dp)


@dataclass(frozen=True)
class SimConfig:
    nodes: int = 8
    gpus: int = 8
    job: str = "job-sim"
    seed: int = 0
    start_ts: float = DEFAULT_START_TS
    sample_interval_s: float = 1.0
    heartbeat_interval_s: float = 5.0
    step_time_s: float = 10.0
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    tokens_per_step: int = 4 * 1024 * 1024
    checkpoint_every: int = 10  # steps (~100 s): faults are dense in a test trace, restarts roll back to it
    restart_s: float = 30.0  # a job-wide episode ends with a restart taking this long
    # ProcessGroupNCCL timeout of the simulated job: shorter than torch's 10 min default so that a
    # crash episode (sympathetic timeouts, then the restart) fits in ~2 minutes of trace.
    nccl_timeout_ms: int = 60_000
    noise: bool = True  # benign unlabelled noise (Xid 63/92, NCCL INFO, single NIC flaps)
    # Healthy variance of a real job (unlabelled): pauses every rank takes together, and the odd
    # rank whose data loader stalls for a step.
    checkpoint_pause_s: float = 25.0  # saving a checkpoint holds the step after it
    eval_every: int = 50  # steps between evaluation passes
    eval_pause_s: float = 30.0
    loader_stall_p: float = 0.01  # per step: one rank's compute takes 1.3-2× (a slow batch)
    # Share of the nodes where stack capture fails (py-spy not installed, ptrace denied): their
    # agents answer a capture request with ``ok: false``.
    stack_fail_share: float = 0.1
    # Every rank runs the trainer hook with torch's Flight Recorder, as a real job with the hook does
    # (trainer_hooks.hook): a capture request is answered by the agent's py-spy dump and, from the
    # hook, a faulthandler dump and the recorder dump (simulator.recorder), the last
    # ``recorder_buffer`` collectives of each rank. False: py-spy stacks alone (a trainer without the
    # hook), the stacks-only reading of a hang.
    flight_recorder: bool = True
    recorder_buffer: int = 24  # TORCH_FR_BUFFER_SIZE of the simulated job: the step in progress and the one before
    # RDMA port counters (source `net`): one sample per node per interval, 0 for none; a rail moves
    # this many bytes per second (each way) while the job steps (HDR 200 Gb/s is 25 GB/s at most).
    net_interval_s: float = 5.0
    rail_bytes_s: float = 6e9

    def layout(self) -> Layout:
        return choose_layout(self.nodes, self.gpus, self.tp, self.pp, self.dp)

    def node_names(self) -> list[str]:
        return [f"n{i:03d}" for i in range(self.nodes)]
