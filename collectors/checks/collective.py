"""An intra-node collective: a few local processes all_reduce a known tensor and compare.

NCCL over the node's GPUs (one process per GPU), gloo on the CPU otherwise. Each rank is a
subprocess (``python -m faultlens.collectors.checks.collective --rank R ...``) that prints one JSON line,
so a hung rank is killed at the deadline instead of hanging the agent; the verdict
(:func:`judge_collective`) is pure over what the ranks printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Sequence

from faultlens.collectors.checks.result import CheckResult, skipped
from faultlens.streams.local_port import free_port

NAME = "collective"
ELEMENTS = 1 << 16


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    ok: bool
    max_error: float | None = None
    error: str = ""
    started: bool = True  # it imported torch and said "ready"; an error before that is our setup's


def expected_sum(world: int) -> float:
    return world * (world + 1) / 2.0  # rank r contributes r + 1 everywhere


# Errors of our own setup, not of the machine: a port taken between picking and binding it.
_SETUP_ERRORS = ("Address already in use", "EADDRINUSE")


def judge_collective(outcomes: Sequence[RankOutcome], world: int, timeout_s: float | None = None) -> CheckResult:
    """Pure: every rank answered, without error, with the exact sum.

    Evidence against the machine: a rank that hung in the collective, a wrong sum, an error of a
    started rank. A rank that never started (torch would not import) or a port clash is
    inconclusive: the check could not run, which says nothing about the GPUs.
    """
    answered = {o.rank for o in outcomes}
    silent = sorted(set(range(world)) - answered)
    problems: list[str] = []
    setup: list[str] = []
    if silent:
        why = f"no answer within {timeout_s:g}s" if timeout_s is not None else "no answer"
        problems.append(f"rank(s) {silent} gave {why} (all_reduce hung?)")
    for o in sorted(outcomes, key=lambda o: o.rank):
        if not o.ok:
            text = f"rank {o.rank}: {o.error}"
            (setup if not o.started or any(e in o.error for e in _SETUP_ERRORS) else problems).append(text)
        elif o.max_error is None or o.max_error > 0.0:
            problems.append(f"rank {o.rank}: all_reduce sum off by {o.max_error}")
    if problems:
        return CheckResult(NAME, False, "; ".join(problems + setup))
    if setup:
        return CheckResult(NAME, False, "could not run: " + "; ".join(setup), inconclusive=True)
    return CheckResult(NAME, True, f"all_reduce over {world} local rank(s) exact")


def run_collective(world: int, backend: str, timeout_s: float, *, stall_rank: int | None = None,
                   start_s: float = 120.0) -> list[RankOutcome]:
    """Start ``world`` ranks, collect their lines, kill the rest.

    Each rank prints ``ready`` once torch is imported; ``timeout_s`` counts from the last one
    ready (a loaded machine may take long to import torch, which says nothing about its GPUs),
    and a rank not ready within ``start_s`` is silent. ``stall_rank`` makes that rank never join
    the collective (fault injection for tests).
    """
    port = free_port()
    procs: list[subprocess.Popen] = []
    lines: list[list[str]] = []
    ready: list[threading.Event] = []
    errs: list[IO[str]] = []
    started: list[threading.Event] = []
    for rank in range(world):
        cmd = [sys.executable, "-m", "faultlens.collectors.checks.collective", "--rank", str(rank), "--world", str(world),
               "--port", str(port), "--backend", backend,
               # Ranks give up before the parent does, so one waiting on a dead peer says so itself.
               "--timeout", str(max(1.0, 0.5 * timeout_s))]
        if stall_rank == rank:
            cmd.append("--stall")
        # stderr to a file: a chatty rank (NCCL_DEBUG=INFO) must not block on a full pipe.
        errs.append(tempfile.TemporaryFile(mode="w+"))
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errs[-1], text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        procs.append(p)
        lines.append([])
        ready.append(threading.Event())
        started.append(threading.Event())
        threading.Thread(target=_read, args=(p, lines[-1], ready[-1], started[-1]), daemon=True).start()
    start_deadline = time.monotonic() + start_s
    for ev in ready:
        ev.wait(max(0.0, start_deadline - time.monotonic()))
    deadline = time.monotonic() + timeout_s
    outcomes = []
    for rank, p in enumerate(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            continue  # silent: judged as such
        errs[rank].seek(0)
        outcomes.append(_parse(rank, p.returncode, lines[rank], errs[rank].read(), started[rank].is_set()))
    for f in errs:
        f.close()
    return outcomes


def _read(p: subprocess.Popen, into: list[str], ready: threading.Event, started: threading.Event) -> None:
    for line in p.stdout or ():  # a pipe: Popen was given stdout=PIPE
        if line.strip() == "ready":
            started.set()
            ready.set()
        else:
            into.append(line)
    ready.set()  # exited before (or without) saying ready: nothing more to wait for


def _parse(rank: int, code: int | None, out: list[str], err: str, started: bool = True) -> RankOutcome:
    for line in reversed(out):
        try:
            obj = json.loads(line)
            return RankOutcome(rank, bool(obj["ok"]), obj.get("max_error"), str(obj.get("error", "")), started)
        except (ValueError, KeyError, TypeError):
            continue
    tail = (err.strip().splitlines() or ["no output"])[-1]
    return RankOutcome(rank, False, None, f"exited {code}: {tail[:200]}", started)


def check_collective(*, world: int | None = None, timeout_s: float = 60.0, stall_rank: int | None = None,
                     start_s: float = 120.0) -> CheckResult:
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return skipped(NAME, "torch is not installed on this node")
    if not dist.is_available():
        return skipped(NAME, "this torch has no torch.distributed")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 1 and world is None:
        return skipped(NAME, "one GPU: no intra-node collective to run")
    backend = "nccl" if gpus > 1 else "gloo"
    world = world or (gpus if gpus > 1 else 2)
    outcomes = run_collective(world, backend, timeout_s, stall_rank=stall_rank, start_s=start_s)
    return judge_collective(outcomes, world, timeout_s)


def _worker(args: argparse.Namespace) -> dict:
    import datetime

    import torch
    import torch.distributed as dist

    print("ready", flush=True)
    if args.stall:
        while True:
            time.sleep(1.0)
    device = f"cuda:{args.rank}" if args.backend == "nccl" else "cpu"
    if args.backend == "nccl":
        torch.cuda.set_device(args.rank)
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=args.timeout))
    try:
        t = torch.full((ELEMENTS,), float(args.rank + 1), device=device)
        dist.all_reduce(t)
        err = float((t - expected_sum(args.world)).abs().max().cpu())
    finally:
        dist.destroy_process_group()
    return {"rank": args.rank, "ok": True, "max_error": err}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m faultlens.collectors.checks.collective",
                                description="One rank of the intra-node collective check (started by the agent).")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--stall", action="store_true", help="never join (fault injection for tests)")
    args = p.parse_args(argv)
    try:
        result = _worker(args)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as this rank's failure
        result = {"rank": args.rank, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
