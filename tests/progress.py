"""Waiting for progress, never for a fixed wall time (issue 47).

A wait that fails after a fixed number of seconds fails on a loaded machine while the work is still
moving: the demo's end-to-end test died at ``timeout=240`` on a 2-core machine shared with other
work while the demo was printing progress every two seconds. Here a wait fails only when NOTHING
MOVED for ``stall_s`` seconds (a progress signal that did not change: lines printed, records read,
a file grown, a counter), however long the work takes while it moves; ``limit_s`` is a generous
outer bound against a true livelock (something that moves forever and never ends), not a guess
at how long the work takes.

* :func:`wait_until`: poll a condition, with a progress signal of the test's choosing;
* :func:`run_watched`: run a process to its end, its progress its output lines (or the keys
  the test reads from them) and, optionally, the files it writes.

A test that uses these with ``limit_s`` above the pytest-timeout default (300 s) marks itself
``@pytest.mark.timeout(...)`` above ``limit_s``, so the helper's message (what stalled, the
output's tail) is what a failure says.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

DEFAULT_LIMIT_S = 1800.0


class Stalled(AssertionError):
    """The awaited work made no progress for the stall bound (or passed the outer limit)."""


def wait_until(condition: Callable[[], T], *, progress: Callable[[], Hashable], stall_s: float,
               what: str, limit_s: float = DEFAULT_LIMIT_S, poll_s: float = 0.1,
               explain: Callable[[], str] | None = None) -> T:
    """``condition()``'s first truthy value. Fails (:class:`Stalled`) when ``progress()`` returned
    the same value for ``stall_s`` seconds on end, or after ``limit_s`` in all; ``explain()`` is
    added to the failure (the processes' logs, say).

    ``progress`` is what the awaited work moves: a count of records read, a runner's
    ``records_in``, a file's size, a replay's event time. Any change restarts the stall clock, so a
    machine that runs the work at a tenth of its speed only makes the wait longer."""
    start = last_move = time.monotonic()
    seen = progress()
    while True:
        value = condition()
        if value:
            return value
        now = time.monotonic()
        current = progress()
        if current != seen:
            seen, last_move = current, now
        elif now - last_move > stall_s:
            raise Stalled(f"{what}: no progress for {stall_s:.0f} s (still at {_short(seen)}; "
                          f"{now - start:.0f} s in all){_explained(explain)}")
        if now - start > limit_s:
            raise Stalled(f"{what}: still moving but not done after the outer limit of {limit_s:.0f} s "
                          f"(at {_short(current)}){_explained(explain)}")
        time.sleep(poll_s)


def _explained(explain: Callable[[], str] | None) -> str:
    return f"\n{explain()}" if explain is not None else ""


def procs_progress(procs: Iterable) -> tuple:
    """The progress of running pipeline processes (faultlens.demo.processes.Proc): the JSON lines
    each printed and the size of each one's log. A wait on several processes moves while any of
    them does (a diagnosis that needs the collector, the diagnoser and the remediator)."""
    return tuple((len(p.lines), _size(p.log_path)) for p in list(procs))


def cpu_ticks(pid: int) -> int:
    """The clock ticks of CPU ``pid`` spent, its own and its reaped children's (Linux's
    /proc/PID/stat: utime, stime, cutime, cstime); 0 once it is gone or where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return sum(int(f) for f in fields[11:15])


def _short(value: object, n: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."


def files_size(*paths: Path) -> int:
    """The bytes under ``paths`` (files, or folders walked): a progress signal for work that writes."""
    total = 0
    for path in paths:
        if path.is_file():
            total += _size(path)
        elif path.is_dir():
            total += sum(_size(Path(root) / f) for root, _, files in os.walk(path) for f in files)
    return total


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # written and removed between the walk and the stat
        return 0


class _Lines:
    """One pipe read line by line in a thread: the text kept, and the progress keys seen."""

    def __init__(self, stream, key: Callable[[str], Hashable | None]) -> None:
        self.lines: list[str] = []
        self.keys: set[Hashable] = set()
        self._key = key
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)
            k = self._key(line)
            if k is not None:
                self.keys.add(k)
        stream.close()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def run_watched(argv: Sequence[str], *, stall_s: float, limit_s: float = DEFAULT_LIMIT_S,
                line_key: Callable[[str], Hashable | None] = str.rstrip, watch: Iterable[Path] = (),
                env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                input: str | None = None, what: str | None = None, cpu: bool = False) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end, its stdout and stderr captured as text (as ``subprocess.run`` with
    ``capture_output=True, text=True``), and fail only when it made no progress for ``stall_s``.

    Progress is a new distinct ``line_key(line)`` of a line it printed (on either stream; a key of
    None is no progress: a status line printed every two seconds whatever happens says nothing
    until its numbers move) or a change in the size of the files under ``watch``. A process that
    stalls, or passes ``limit_s``, is stopped with its whole process group (it may have started a
    broker or workers of its own) and the failure shows its output's tail.

    ``cpu``: the CPU seconds the process (and the children it reaped) spent are progress too. For
    a short command that prints only at its end (an interpreter starting, imports, a report
    written): a busy machine gives it a smaller share of a core, which slows its CPU clock but
    never stops it; one blocked on something that never comes stops it. A process that polls in
    a loop keeps moving it, so the outer ``limit_s`` is what ends that."""
    what = what or " ".join(map(str, argv[:4]))
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    if input is not None:
        threading.Thread(target=_feed, args=(proc.stdin, input), daemon=True).start()
    out, err = _Lines(proc.stdout, line_key), _Lines(proc.stderr, line_key)
    watched = [Path(p) for p in watch]
    try:
        wait_until(lambda: proc.poll() is not None,
                   progress=lambda: (len(out.keys), len(err.keys), files_size(*watched),
                                     cpu_ticks(proc.pid) if cpu else None),
                   stall_s=stall_s, limit_s=limit_s, what=what, poll_s=0.2)
    except Stalled as exc:
        _stop_group(proc)
        out.join(5)
        err.join(5)
        raise Stalled(f"{exc}\n--- stderr (tail) ---\n{err.text[-3000:]}\n--- stdout (tail) ---\n{out.text[-1500:]}") from None
    except BaseException:  # pytest-timeout, Ctrl-C: never leave the process group behind
        _stop_group(proc)
        raise
    # The pipes close when the process and every child holding them end; a child left running
    # (a broker the process failed to stop) must not hold the test: its output is cut there.
    out.join(30)
    err.join(30)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out.text, err.text)


def _feed(stdin, text: str) -> None:
    try:
        stdin.write(text)
        stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the process ended without reading all of it: its exit status says why


def _stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to the process group (a clean stop: the demo writes a partial report), SIGKILL to
    whatever is left after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:
            try:  # the leader is gone; children it left in the group are not ours to keep
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
