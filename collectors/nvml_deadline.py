"""NVML calls under a deadline: each GPU's calls run on a worker thread the sampler can abandon.

A degrading GPU can wedge the driver so that an NVML call never returns (NVSentinel issue #1748:
a GPU stalled DCGM until the monitor was killed 49 times, and its ECC errors were never
reported). A thread stuck in a driver ioctl cannot be killed from Python, and a process stuck
there cannot be reaped either, so the agent does the only thing that always works: it stops
waiting. Each GPU has its own worker thread; the sampler hands it one job per sample (read that
GPU) and waits for it only as long as the job's *current call* is younger than the deadline.
A call past the deadline leaves its worker behind (a daemon thread, still blocked), the GPU is
marked stuck and asked nothing more until that call returns, and the next job for it gets a new
worker. At most one worker per GPU is ever stuck, so a wedged node costs a handful of threads.

Time the whole process did not run (a paused VM, a frozen cgroup) does not count against a call:
the waiter notices it overslept and restarts the deadlines, so a machine that was only paused is
never reported as a wedged GPU.

The call being made is recorded by :func:`note_call` (the one choke point every NVML call of
:class:`collectors.nvml_reader.NvmlReader` goes through), so the deadline is per call and the
timeout names the call.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)

_local = threading.local()
# A waiter that wakes this much later than it asked to was stopped with its whole process.
STALL_S = 1.0


class Job:
    """One unit of work on a worker; ``call`` / ``started`` follow the NVML call in progress."""

    __slots__ = ("fn", "key", "done", "result", "error", "call", "started", "submitted", "finished")

    def __init__(self, fn: Callable[[], Any], key: Any):
        self.fn = fn
        self.key = key
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.call = "(queued)"
        self.submitted = self.started = time.monotonic()
        self.finished: float | None = None


def note_call(name: str) -> None:
    """Called before every NVML call: the deadline runs from here and a timeout names ``name``."""
    job = getattr(_local, "job", None)
    if job is not None:
        job.call = name
        job.started = time.monotonic()


@dataclass(frozen=True, slots=True)
class Stuck:
    """A call that outlived its deadline and has not returned yet."""

    key: Any
    call: str
    since: float  # monotonic time the call started
    job: Job

    def age(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.since


class _Worker:
    def __init__(self, key: Any, on_late_return: Callable[[Job], None]):
        self.key = key
        self.jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.abandoned = False
        self._on_late_return = on_late_return
        self.thread = threading.Thread(target=self._loop, name=f"nvml-{key}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            _local.job = job
            job.started = time.monotonic()
            try:
                job.result = job.fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter, who re-raises it
                job.error = exc
            finally:
                _local.job = None
                job.finished = time.monotonic()
                job.done.set()
            if self.abandoned:
                # The call came back after all: say so, and let this thread end (a new worker
                # already serves this key).
                self._on_late_return(job)
                return


class DeadlineCalls:
    """Workers keyed by GPU index (or ``"node"``); :meth:`run_all` waits for jobs under a deadline."""

    def __init__(self, deadline_s: float, on_late_return: Callable[[Stuck, float], None] | None = None):
        if deadline_s <= 0:
            raise ValueError("an NVML deadline must be positive")
        self.deadline_s = deadline_s
        self._workers: dict[Any, _Worker] = {}
        self._stuck: dict[Any, Stuck] = {}
        self._lock = threading.Lock()
        self._user_late_return = on_late_return
        self.abandoned = 0  # workers left behind so far (each one a call past its deadline)

    # --- the sampler's side ------------------------------------------------------------------
    def stuck(self) -> dict[Any, Stuck]:
        with self._lock:
            return dict(self._stuck)

    def is_stuck(self, key: Any) -> bool:
        with self._lock:
            return key in self._stuck

    def submit(self, key: Any, fn: Callable[[], Any]) -> Job:
        if self.is_stuck(key):
            raise RuntimeError(f"{key} has a call in progress past its deadline")
        worker = self._workers.get(key)
        if worker is None or worker.abandoned:
            worker = self._workers[key] = _Worker(key, self._late_return)
        job = Job(fn, key)
        worker.jobs.put(job)
        return job

    def wait(self, jobs: list[Job], deadline_s: float | None = None) -> list[Stuck]:
        """Wait until every job is done or its current call is older than the deadline; returns
        the jobs given up on (their workers abandoned, their keys stuck until the call returns)."""
        limit = self.deadline_s if deadline_s is None else deadline_s
        pending = list(jobs)
        given_up: list[Stuck] = []
        while pending:
            now = time.monotonic()
            still = []
            for job in pending:
                if job.done.is_set():
                    continue
                if now - job.started > limit:
                    given_up.append(self._abandon(job))
                else:
                    still.append(job)
            pending = still
            if pending:
                # Sleep until the first job could go past its deadline (a call that moved on to
                # the next one pushes its own expiry later; it is looked at again then).
                first = min(j.started for j in pending) + limit
                nap = max(0.001, min(first - time.monotonic(), limit))
                before = time.monotonic()
                if not pending[0].done.wait(nap):
                    slept = time.monotonic() - before
                    if slept - nap > STALL_S:
                        # This process was not running (a VM paused, a frozen cgroup, SIGSTOP): its
                        # NVML calls were not either, and that time is not the GPU's. The whole nap
                        # is credited (the pause may have begun anywhere in it): a real hang is then
                        # reported one deadline later at most, a pause never.
                        log.warning("the agent did not run for about %.1fs; NVML deadlines restart", slept - nap)
                        for job in pending:
                            job.started += slept
        return given_up

    def run(self, key: Any, fn: Callable[[], Any], deadline_s: float | None = None) -> Any:
        """``fn()`` on the worker of ``key``; :class:`CallTimeout` past the deadline."""
        job = self.submit(key, fn)
        given_up = self.wait([job], deadline_s)
        if given_up:
            raise CallTimeout(given_up[0], self.deadline_s if deadline_s is None else deadline_s)
        if job.error is not None:
            raise job.error
        return job.result

    def close(self, timeout_s: float = 0.0) -> list[str]:
        """End the workers and join them, ``timeout_s`` in all; returns the names of the threads
        still running. An idle worker ends at once. One abandoned in a call past its deadline
        cannot be ended from Python (the driver holds it): it is not waited for, and ends by itself
        when the call returns (a daemon thread, it never holds the process's exit). Calls after
        this get new workers (a source the agent restarts runs again)."""
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        live = [w for w in workers if not w.abandoned]
        for worker in live:
            worker.jobs.put(None)
        until = time.monotonic() + timeout_s
        for worker in live:
            worker.thread.join(max(0.0, until - time.monotonic()))
        return [w.thread.name for w in workers if w.thread.is_alive()]

    # --- internals -----------------------------------------------------------------------------
    def _abandon(self, job: Job) -> Stuck:
        with self._lock:
            worker = self._workers.get(job.key)
            if worker is not None:
                worker.abandoned = True
                worker.jobs.put(None)  # ends it once the stuck call returns (or now, if it just did)
            stuck = self._stuck[job.key] = Stuck(job.key, job.call, job.started, job)
            self.abandoned += 1
        log.error("NVML call %s for %s did not return within %.1fs; its thread is left behind",
                  job.call, job.key, self.deadline_s)
        if job.done.is_set():  # it returned between the check and the mark: not stuck after all
            self._late_return(job)
        return stuck

    def _late_return(self, job: Job) -> None:
        with self._lock:
            stuck = self._stuck.get(job.key)
            if stuck is None or stuck.job is not job:
                return
            del self._stuck[job.key]
        took = (job.finished or time.monotonic()) - stuck.since
        log.warning("NVML call %s for %s returned after %.1fs", stuck.call, job.key, took)
        if self._user_late_return is not None:
            self._user_late_return(stuck, took)


class CallTimeout(Exception):
    def __init__(self, stuck: Stuck, deadline_s: float):
        self.stuck = stuck
        self.deadline_s = deadline_s
        super().__init__(f"{stuck.call} did not return within {deadline_s:g}s")
