"""Find the training processes on this node and dump their Python stacks with py-spy.

Hang and fail-slow diagnosis (docs/design.md §5) compares the stacks of every rank, so each dump
carries the rank it came from. Nothing here raises for a process or tool that misbehaves: a
process that exited, a py-spy that is missing, fails or hangs gives a dump event whose text says
what went wrong, because "rank 17 could not be dumped" is itself evidence.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import psutil

from faultlens.events.envelope import Envelope

log = logging.getLogger(__name__)

DEFAULT_RANK_ENV = "RANK"
_DUMP_LIMIT = 256 * 1024  # a dump of thousands of threads is cut, not sent as a 10 MB event


@dataclass(frozen=True, slots=True)
class TrainingProcess:
    pid: int
    rank: int | None
    cmdline: str


@dataclass(frozen=True, slots=True)
class DumpResult:
    pid: int | None  # None: no process to dump (the text says why)
    rank: int | None
    dump: str
    ok: bool
    timed_out: bool = False  # py-spy did not answer within its deadline (the rank may be wedged)


def rank_from_environ(env: Mapping[str, str], rank_env: str = DEFAULT_RANK_ENV) -> int | None:
    """The global rank of a process from its environment.

    ``rank_env`` (default ``RANK``) first; else torchrun's ``LOCAL_RANK`` plus this node's offset
    (``GROUP_RANK`` or ``NODE_RANK`` times ``LOCAL_WORLD_SIZE``); ``None`` when neither says.
    """
    def num(name: str) -> int | None:
        try:
            return int(env[name])
        except (KeyError, ValueError):
            return None

    rank = num(rank_env)
    if rank is not None:
        return rank
    local, size = num("LOCAL_RANK"), num("LOCAL_WORLD_SIZE")
    node_rank = num("GROUP_RANK") if num("GROUP_RANK") is not None else num("NODE_RANK")
    if local is not None and size is not None and node_rank is not None:
        return node_rank * size + local
    single_node = size is not None and num("WORLD_SIZE") == size
    return local if local is not None and single_node else None


def _rank_of(proc: psutil.Process, rank_env: str) -> int | None:
    try:
        return rank_from_environ(proc.environ(), rank_env)
    except (psutil.Error, OSError):
        return None


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except (psutil.Error, OSError):
        return ""


def _ancestors(pid: int) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(pid).parents()}
    except psutil.Error:
        return set()


def _topmost(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Drop processes whose ancestor is in the list too: a rank's DataLoader workers carry the
    rank's environment and command line, but the rank is the parent."""
    pids = {p.pid for p in procs}
    out = []
    for p in procs:
        try:
            if not any(a.pid in pids for a in p.parents()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def find_training_processes(*, launcher_pid: int | None = None, proc_pattern: str | None = None,
                            rank_env: str = DEFAULT_RANK_ENV) -> list[TrainingProcess]:
    """The training processes of this node, by launcher process tree or by command-line regex.

    Under a launcher, the workers are the topmost descendants that carry a rank in their
    environment; when none does (environment unreadable), the launcher's direct children. By
    pattern, the topmost matches that carry a rank, else the topmost matches.
    """
    me = os.getpid()
    candidates: list[psutil.Process] = []
    if launcher_pid is not None:
        try:
            launcher = psutil.Process(launcher_pid)
            descendants = launcher.children(recursive=True)
        except psutil.Error as exc:
            log.warning("launcher pid %d: %s", launcher_pid, exc)
            descendants = []
        ranked = [p for p in descendants if _rank_of(p, rank_env) is not None]
        if ranked:
            candidates = _topmost(ranked)
        else:
            try:
                candidates = launcher.children(recursive=False) if descendants else []
            except psutil.Error:
                candidates = []
    elif proc_pattern:
        regex = re.compile(proc_pattern)
        # What the agent runs under (`timeout`, a shell, sudo) holds the pattern in its own command
        # line: seen on a real node (docs/real_gpu.md), its wrapper was reported as the training
        # process until the trainer started. Such a process is skipped unless it carries a rank.
        wrappers = _ancestors(me)
        for p in psutil.process_iter():
            if p.pid == me:
                continue
            line = _cmdline(p)
            if line and regex.search(line) and not (p.pid in wrappers and _rank_of(p, rank_env) is None):
                candidates.append(p)
        # `torchrun train.py` matches "train.py" as well as its workers do: when some matches
        # carry a rank, those are the training processes.
        ranked = [p for p in candidates if _rank_of(p, rank_env) is not None]
        candidates = _topmost(ranked or candidates)
    out = []
    for p in sorted(candidates, key=lambda p: p.pid):
        if p.pid == me:
            continue
        try:
            if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        out.append(TrainingProcess(p.pid, _rank_of(p, rank_env), _cmdline(p)))
    return out


def py_spy_binary() -> str | None:
    """py-spy from PATH, or beside this Python (a venv's bin/ is often not on PATH)."""
    found = shutil.which("py-spy")
    if found:
        return found
    candidate = Path(sys.executable).parent / "py-spy"
    return str(candidate) if candidate.exists() else None


def dump_stack(pid: int, *, timeout_s: float = 10.0, binary: str | None = None, native: bool = False) -> tuple[bool, str]:
    """``py-spy dump --pid PID``: (ok, text). On failure the text says why (tool missing, timeout, error)."""
    ok, text, _ = dump_stack_timed(pid, timeout_s=timeout_s, binary=binary, native=native)
    return ok, text


def dump_stack_timed(pid: int, *, timeout_s: float = 10.0, binary: str | None = None,
                     native: bool = False) -> tuple[bool, str, bool]:
    """(ok, text, timed_out). py-spy runs in a session of its own: on its deadline the whole
    group is killed (a wrapper's children too), and a py-spy that will not die (stuck attaching to
    a process in uninterruptible sleep) is left to a reaper thread, never waited for."""
    binary = binary or py_spy_binary()
    if not binary:
        return False, "py-spy not found (pip install py-spy, or put it on PATH)", False
    cmd = [binary, "dump", "--pid", str(pid)]
    if native:
        cmd.append("--native")
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True, errors="replace", start_new_session=True)
    except OSError as exc:
        return False, f"py-spy could not run: {exc}", False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return False, f"py-spy dump --pid {pid} did not finish within {timeout_s:g}s (timed out: the process may be wedged)", True
    if proc.returncode != 0:
        detail = (err or out).strip() or "no output"
        return False, f"py-spy dump --pid {pid} failed (exit {proc.returncode}): {detail}"[:_DUMP_LIMIT], False
    text = out
    if len(text) > _DUMP_LIMIT:
        text = text[:_DUMP_LIMIT] + "\n... (cut)\n"
    return True, text, False


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    try:
        proc.communicate(timeout=2.0)
    except subprocess.TimeoutExpired:
        log.error("py-spy pid %d did not die after SIGKILL; left to a reaper thread", proc.pid)
        threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()


def capture(processes: list[TrainingProcess], *, deadline_s: float | None = None, **dump_kwargs) -> list[DumpResult]:
    """One dump per process, in pid order (sequential: py-spy pauses its target, and pausing
    every rank at once on a node would be a bigger hiccup for the job than one after another).
    Past ``deadline_s`` for the whole capture, the ranks not dumped yet are answered as timed
    out rather than waited for: a diagnoser waiting on them learns "no answer in time", not silence."""
    results = []
    start = time.monotonic()
    for proc in processes:
        if deadline_s is not None and time.monotonic() - start >= deadline_s:
            results.append(DumpResult(proc.pid, proc.rank, f"not dumped: the capture's deadline of {deadline_s:g}s "
                                                            f"passed before this rank's turn (timed out)", False, True))
            continue
        ok, text, timed_out = dump_stack_timed(proc.pid, **dump_kwargs)
        if not ok:
            log.warning("stack of pid %d (rank %s): %s", proc.pid, proc.rank, text.splitlines()[0] if text else "")
        results.append(DumpResult(proc.pid, proc.rank, text, ok, timed_out))
    return results


def dump_event(result: DumpResult, *, job: str, node: str, request_id: str, ts: float | None = None,
               rank_env: str | None = None) -> Envelope:
    """The `stack`/`stack_dump` event (docs/events.md) of one dump; ``ok`` tells a dump from an error.
    ``rank_env``, the variable the rank was read from, lets a reader of a null rank say what to fix."""
    data = {"rank": result.rank, "pid": result.pid, "dump": result.dump, "request_id": request_id,
            "tool": "py-spy", "ok": result.ok}
    if result.timed_out:
        data["timed_out"] = True
    if rank_env is not None:
        data["rank_env"] = rank_env
    return Envelope(
        ts=ts if ts is not None else time.time(),
        job=job,
        node=node,
        source="stack",
        kind="stack_dump",
        data=data,
    )


def unranked_pids(processes: list[TrainingProcess]) -> list[int]:
    """The training processes whose rank could not be read: their stacks cannot be placed."""
    return sorted(p.pid for p in processes if p.rank is None)
