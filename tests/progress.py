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
  the test reads from them) and, optionally, the files it writes and its CPU clock;
* :class:`Watched`: a process the test talks to while it runs: wait for a line it prints, send
  it a signal, wait for its end, each wait failing only on a stall;
* :func:`stop_proc`: stop a pipeline process (faultlens.demo.processes.Proc) and wait for its
  end while it moves.

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


def thread_ticks(thread: threading.Thread) -> int:
    """The clock ticks of CPU one thread of this process spent (Linux's /proc/self/task/TID/stat:
    utime, stime); 0 once it is gone or where there is no /proc. The progress of a thread the
    test started (a consumer that must see the end of a topic): one that polls moves it, a busy
    machine only slows it, one that died or is blocked for good stops it."""
    if thread.native_id is None or not thread.is_alive():
        # Gone: Linux hands its TID to the next thread made, and /proc would then read that one's
        # ticks (a full run read 49 for a joined thread).
        return 0
    try:
        stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def others_ticks() -> int:
    """The clock ticks of CPU spent by this process's threads other than the caller's and by its
    live child processes (and theirs): the progress of work the test started in-process (an
    agent's sources, a consumer) while the test's own thread waits, its polling left out."""
    me = threading.get_native_id()
    total = 0
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task") if int(t) != me]
    except OSError:
        return 0
    for tid in tids:
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue  # ended between the listing and the read
        fields = stat[stat.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])
    import psutil  # a dependency of the test set; imported here so the module stays stdlib-only to load

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        children = []
    return total + sum(cpu_ticks(child.pid) for child in children)


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
        self.done = False  # the pipe reached its end
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
        self.done = True

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def text(self) -> str:
        return "".join(self.lines)


class Watched:
    """A process the test started and reads as it runs: its stdout and stderr kept line by line as
    they come (threads, so a full pipe never blocks it), and waits for a line of it or for its end
    that fail only when it stops moving (:func:`wait_until`), never at a fixed time.

    Progress is a new distinct ``line_key(line)`` of a line it printed (on either stream; a key of
    None is no progress: a status line printed every two seconds whatever happens says nothing
    until its numbers move), a change in the size of the files under ``watch`` and, with ``cpu``,
    the CPU time it (and the children it reaped) spent: a busy machine gives it a smaller share
    of a core, which slows its CPU clock but never stops it; one blocked on something that never
    comes stops it. A process that polls in a loop keeps its clock moving, so the outer
    ``limit_s`` is what ends that.

    It runs in a session of its own; leaving the ``with`` block (or :meth:`kill`) stops its whole
    process group (it may have started a broker or workers of its own) if it is still running."""

    def __init__(self, argv: Sequence[str], *, line_key: Callable[[str], Hashable | None] = str.rstrip,
                 watch: Iterable[Path] = (), env: dict[str, str] | None = None,
                 cwd: str | os.PathLike[str] | None = None, input: str | None = None, cpu: bool = False,
                 what: str | None = None) -> None:
        self.argv = list(argv)
        self.what = what or " ".join(map(str, self.argv[:4]))
        self.popen = subprocess.Popen(self.argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                                      start_new_session=True)
        if input is not None:
            threading.Thread(target=_feed, args=(self.popen.stdin, input), daemon=True).start()
        self.out, self.err = _Lines(self.popen.stdout, line_key), _Lines(self.popen.stderr, line_key)
        self._watched = [Path(p) for p in watch]
        self._cpu = cpu

    @property
    def pid(self) -> int:
        return self.popen.pid

    def progress(self) -> tuple:
        return (len(self.out.keys), len(self.err.keys), files_size(*self._watched),
                cpu_ticks(self.popen.pid) if self._cpu else None)

    def tail(self) -> str:
        return (f"--- stderr (tail) ---\n{self.err.text[-3000:]}\n"
                f"--- stdout (tail) ---\n{self.out.text[-1500:]}")

    def wait_line(self, predicate: Callable[[str], object], *, stall_s: float, limit_s: float = DEFAULT_LIMIT_S,
                  what: str | None = None) -> str:
        """The first stdout line (without its newline) for which ``predicate`` holds, once it is
        printed. Fails when the process made no progress for ``stall_s``, or ended without one."""
        def found() -> str | None:
            ended = self.popen.poll() is not None and self.out.done  # asked first: no line read after
            for line in list(self.out.lines):
                if predicate(line.rstrip("\n")):
                    return line.rstrip("\n")
            if ended:
                raise Stalled(f"{what or self.what}: the process ended (exit {self.popen.returncode}) "
                              "without that line")
            return None
        return self._wait(found, stall_s, limit_s, what or f"a line of {self.what}")

    def wait_exit(self, *, stall_s: float, limit_s: float = DEFAULT_LIMIT_S,
                  what: str | None = None) -> subprocess.CompletedProcess:
        """Its end, as ``subprocess.run(capture_output=True, text=True)`` returns it: stdout and
        stderr whole (what was read before this wait included)."""
        self._wait(lambda: self.popen.poll() is not None, stall_s, limit_s, what or self.what)
        # The pipes close when the process and every child holding them end; a child left running
        # (a broker the process failed to stop) must not hold the test: its output is cut there.
        self.out.join(30)
        self.err.join(30)
        return subprocess.CompletedProcess(self.argv, self.popen.returncode, self.out.text, self.err.text)

    def stop(self, sig: int = signal.SIGTERM, *, stall_s: float, limit_s: float = DEFAULT_LIMIT_S,
             what: str | None = None) -> subprocess.CompletedProcess:
        """``sig`` to the process (not its group: a clean stop is its own to make), then
        :meth:`wait_exit`: a stop that takes long while it moves (flushing, writing its report)
        is no failure; one that stops moving is."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        return self.wait_exit(stall_s=stall_s, limit_s=limit_s, what=what or f"{self.what} to stop")

    def kill(self) -> None:
        """Its whole process group stopped, if it is still running (a test's clean-up)."""
        if self.popen.poll() is None:
            _stop_group(self.popen)

    def _wait(self, condition: Callable[[], T], stall_s: float, limit_s: float, what: str) -> T:
        try:
            return wait_until(condition, progress=self.progress, stall_s=stall_s, limit_s=limit_s, what=what,
                              poll_s=0.2)
        except Stalled as exc:
            _stop_group(self.popen)
            self.out.join(5)
            self.err.join(5)
            raise Stalled(f"{exc}\n{self.tail()}") from None
        except BaseException:  # pytest-timeout, Ctrl-C: never leave the process group behind
            _stop_group(self.popen)
            raise

    def __enter__(self) -> "Watched":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


def run_watched(argv: Sequence[str], *, stall_s: float, limit_s: float = DEFAULT_LIMIT_S,
                line_key: Callable[[str], Hashable | None] = str.rstrip, watch: Iterable[Path] = (),
                env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                input: str | None = None, what: str | None = None, cpu: bool = False) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end, its stdout and stderr captured as text (as ``subprocess.run`` with
    ``capture_output=True, text=True``), and fail only when it made no progress for ``stall_s``
    (progress as :class:`Watched` has it: new lines, the files under ``watch`` growing, with
    ``cpu`` its CPU clock; ``cpu`` is for a short command that prints only at its end: an
    interpreter starting, imports, a report written). A process that stalls, or passes
    ``limit_s``, is stopped with its whole process group and the failure shows its output's tail."""
    watched = Watched(argv, line_key=line_key, watch=watch, env=env, cwd=cwd, input=input, cpu=cpu, what=what)
    return watched.wait_exit(stall_s=stall_s, limit_s=limit_s)


def stop_proc(proc, *, stall_s: float = 60.0, limit_s: float = 240.0) -> int | None:
    """Stop a pipeline process (faultlens.demo.processes.Proc) as its own ``stop`` does (SIGTERM
    to its group), but wait for its end while it moves (prints, logs, computes: it may be writing
    the history or stopping a broker), not a fixed number of seconds a busy machine outruns; its
    exit status. One that stops moving is killed and fails (:class:`Stalled`)."""
    if proc.popen.poll() is None:
        try:
            os.killpg(proc.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            wait_until(lambda: proc.popen.poll() is not None,
                       progress=lambda: (procs_progress([proc]), cpu_ticks(proc.popen.pid)), stall_s=stall_s,
                       limit_s=limit_s, what=f"{proc.name} to stop", explain=proc.tail, poll_s=0.2)
        except BaseException:
            proc.stop(0.1)  # SIGKILL to what is left, its log closed
            raise
    return proc.stop()


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
