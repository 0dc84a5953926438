"""Every raw log line the simulator writes, in the formats real systems print.

One module so the log parsers (parsing/kernel_log.py, parsing/trainer_log.py) can test
against exactly what the simulator emits: each function returns the text of one line (or a list
for multi-line records such as tracebacks). Kernel lines come as ``dmesg`` prints them, with the
``[uptime]`` prefix (:func:`dmesg`); trainer lines come as torchrun prints a rank's stderr, with
the ``[rankN]:`` prefix, and torch's C++ (glog) lines carry ``[E1122 10:11:12.345678 PID file:line]``.
"""

from __future__ import annotations

import time

KERNEL_VERSION = "5.15.0-105-generic #115-Ubuntu"
NCCL_VERSION = "2.21.5"
C10D = "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
PG = "[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"

# What NVRM prints after "Xid (PCI:...): N, pid=..., name=...," for the Xids the simulator injects.
XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC 2, TPC 1, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1a_2b000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000008",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 1, subpartition 0.",
    63: "Row Remapper: New row (0x0000000001a3f2c0) Marked for Remapping, reset gpu to activate.",
    64: "Row Remapper Error: (0x0000000001a3f2c0) - All reserved rows for bank are remapped",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x4).",
    120: "GSP Error: Task 1 raised error code 0x5 for reason 0x0 at 0x4b8c80 (0 more errors skipped)",
    145: "NVLink: RLW Error (0x00000001, link 5) - Fatal, Link 5 RLW_TX_POISON_ERR (0x0)",
    149: "NVLink: NETIR Error (0x0000000c, link 7) - Fatal, NETIR_LINK_DOWN_ERR",
}


# --- kernel (dmesg) -------------------------------------------------------------------------
def dmesg(uptime_s: float, text: str) -> str:
    """A kernel ring-buffer line as ``dmesg`` prints it: ``[ 12345.678901] text``."""
    return f"[{uptime_s:12.6f}] {text}"


def xid(pci: str, code: int, pid: int | None = 2345, process: str = "python3", text: str | None = None) -> str:
    who = f"pid={pid}, name={process}" if pid is not None else "pid='<unknown>', name=<unknown>"
    return f"NVRM: Xid (PCI:{pci}): {code}, {who}, {text or XID_TEXT[code]}"


def gpu_fell_off_bus(pci: str) -> str:
    return f"NVRM: GPU {pci}.0: GPU has fallen off the bus."


def gpu_crash_dump() -> str:
    return "NVRM: A GPU crash dump has been created. If possible, please run"


def mlx5_module_event(pci: str, what: str = "Cable unplugged") -> str:
    return f"mlx5_core {pci}: mlx5_port_module_event:1105:(pid 0): Port module event: module 0, {what}"


def mlx5_link(pci: str, dev: str, up: bool) -> str:
    return f"mlx5_core {pci} {dev}: Link {'up' if up else 'down'}"


def oom_invoked(process: str = "python3") -> str:
    return f"{process} invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"


def oom_killed(pid: int, process: str = "python3", total_vm_kb: int = 412_334_112, rss_kb: int = 98_765_432) -> str:
    return (f"Out of memory: Killed process {pid} ({process}) total-vm:{total_vm_kb}kB, anon-rss:{rss_kb}kB, "
            f"file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:193412kB oom_score_adj:0")


def soft_lockup(cpu: int, secs: int, pid: int, process: str = "python3") -> str:
    return f"watchdog: BUG: soft lockup - CPU#{cpu} stuck for {secs}s! [{process}:{pid}]"


def hung_task(pid: int, process: str = "python3", secs: int = 120) -> list[str]:
    return [
        f"INFO: task {process}:{pid} blocked for more than {secs} seconds.",
        f"      Not tainted {KERNEL_VERSION}",
        '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
    ]


def kernel_panic() -> list[str]:
    return [
        "BUG: unable to handle page fault for address: ffff9d3b8c1f0000",
        "Oops: 0000 [#1] SMP NOPTI",
        "Kernel panic - not syncing: Fatal exception",
    ]


# --- torch.distributed / NCCL / trainer (rank stderr through torchrun) ------------------------
def glog(severity: str, ts: float, pid: int, where: str) -> str:
    """glog's prefix as torch's C++ code prints it: ``E1122 10:11:12.345678 2345 file:line]``."""
    t = time.gmtime(ts)
    micros = int(round((ts - int(ts)) * 1e6)) % 1_000_000
    return f"{severity}{t.tm_mon:02d}{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{micros:06d} {pid} {where}]"


def ranked(rank: int, text: str) -> str:
    """torchrun's per-rank prefix on a worker's stderr line."""
    return f"[rank{rank}]:{text}" if text.startswith("[") else f"[rank{rank}]: {text}"


def watchdog_timeout(rank: int, ts: float, pid: int, seq: int, op: str, timeout_ms: int, elapsed_ms: int) -> str:
    return ranked(rank, f"[{glog('E', ts, pid, C10D + ':632')} {PG.format(rank=rank)} Watchdog caught collective operation "
                        f"timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, NumelOut=1, Timeout(ms)={timeout_ms}) "
                        f"ran for {elapsed_ms} milliseconds before timing out.")


def watchdog_exception(rank: int, ts: float, pid: int, at_work: int, last_enqueued: int, last_completed: int) -> str:
    return ranked(rank, f"[{glog('E', ts, pid, C10D + ':2168')} {PG.format(rank=rank)} Exception (either an error or timeout) "
                        f"detected by watchdog at work: {at_work}, last enqueued NCCL work: {last_enqueued}, "
                        f"last completed NCCL work: {last_completed}.")


def watchdog_terminated(rank: int, ts: float, pid: int, what: str) -> str:
    return ranked(rank, f"[{glog('E', ts, pid, C10D + ':1595')} {PG.format(rank=rank)} Process group watchdog thread "
                        f"terminated with exception: {what}")


def nccl_prefix(node: str, pid: int, tid: int, local_rank: int) -> str:
    return f"{node}:{pid}:{tid} [{local_rank}]"


def nccl_info(node: str, pid: int, local_rank: int, text: str) -> str:
    return f"{nccl_prefix(node, pid, pid, local_rank)} NCCL INFO {text}"


def nccl_ib_completion_error(node: str, pid: int, tid: int, local_rank: int, peer_ip: str, port: int) -> str:
    return (f"{nccl_prefix(node, pid, tid, local_rank)} NCCL WARN NET/IB : Got completion from peer {peer_ip}<{port}> "
            f"with error 12, opcode 0, len 0, vendor err 129 (Recv)")


def nccl_connection_reset(node: str, pid: int, tid: int, local_rank: int, peer: str, port: int) -> str:
    return (f"{nccl_prefix(node, pid, tid, local_rank)} misc/socket.cc:50 NCCL WARN socketProgress: "
            f"Connection reset by peer {peer}<{port}>")


def nccl_remote_error(rank: int) -> list[str]:
    return [
        ranked(rank, "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
                     f"remote process exited or there was a network error, NCCL version {NCCL_VERSION}"),
        ranked(rank, "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."),
        ranked(rank, "Last error:"),
        ranked(rank, "NET/IB : Got completion from peer with error 12, opcode 0, len 0, vendor err 129 (Recv)"),
    ]


CUDA_ILLEGAL_ACCESS = "CUDA error: an illegal memory access was encountered"


def cuda_error(rank: int, ts: float, pid: int) -> list[str]:
    return [
        watchdog_terminated(rank, ts, pid, CUDA_ILLEGAL_ACCESS),
        ranked(rank, f"RuntimeError: {CUDA_ILLEGAL_ACCESS}"),
        ranked(rank, "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."),
        ranked(rank, "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"),
        ranked(rank, "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."),
    ]


def traceback_frames(frames: list[tuple[str, int, str, str]]) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for file, lineno, func, code in frames:
        out.append(f'  File "{file}", line {lineno}, in {func}')
        out.append(f"    {code}")
    return out


def user_code_traceback(rank: int) -> list[str]:
    """A Python exception raised in the user's own data pipeline (not torch, not NCCL)."""
    lines = traceback_frames([
        ("/workspace/pretrain_gpt.py", 412, "<module>", "main()"),
        ("/workspace/pretrain_gpt.py", 388, "main", "batch = next(train_iter)"),
        ("/workspace/data/packed_loader.py", 97, "__next__", 'tokens = self._pack(sample["input_ids"])'),
    ]) + ["KeyError: 'input_ids'"]
    return [ranked(rank, line) for line in lines]


def nan_warning(rank: int, step: int) -> str:
    return ranked(rank, f"WARNING: loss is nan at iteration {step}; skipping the optimizer step (found inf/nan in grads)")


# --- benign lines (noise that must not be blamed) --------------------------------------------
def nccl_init_complete(node: str, pid: int, local_rank: int, rank: int, nranks: int) -> str:
    return nccl_info(node, pid, local_rank, f"comm 0x55d5c8a3f0 rank {rank} nranks {nranks} cudaDev {local_rank} "
                                            f"nvmlDev {local_rank} busId {0x18 + local_rank:x}000 commId 0x7c1e2f - Init COMPLETE")


def nccl_ib_using(node: str, pid: int, local_rank: int) -> str:
    return nccl_info(node, pid, local_rank, f"NET/IB : Using [0]mlx5_{local_rank}:1/IB [RO]; OOB ib0:10.0.0.1<0>")


def torchrun_worker_failed(ts: float, local_rank: int, pid: int, exitcode: int) -> str:
    """The elastic agent's line when a worker process dies (exit -9: killed, e.g. by the OOM killer)."""
    t = time.gmtime(ts)
    stamp = f"{t.tm_year}-{t.tm_mon:02d}-{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d},{int((ts % 1) * 1000):03d}"
    return (f"[{stamp}] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: {exitcode}) "
            f"local_rank: {local_rank} (pid: {pid}) of binary: /usr/bin/python3")
