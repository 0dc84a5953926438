"""`faultlens diagnose --workers N`: one launch that uses a host's cores (issue 56).

One Python process reads about one core's worth of telemetry (bench/results_throughput.md). The
node stage scales by members of its group (docs/design.md §1); this starts them as children of
the launch, each a whole `diagnose --stage node` member with the launch's settings, while the
launch itself runs the job stage over their `summaries` (with ``--stage node`` or ``job``, more
members of that stage beside it). A child exits with the launch however the launch ends: on
Linux the kernel sends it SIGTERM when the launch dies (PR_SET_PDEATHSIG), elsewhere it watches
its parent; either way it stops as a member stops on SIGTERM (its windows flushed, its input
committed). A child that fails stops the launch, which exits with the child's code.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Callable

from faultlens.diagnosis.edge.consumer import GROUP
from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner.loop import GroupRunner

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
AUTO_MAX = 3
JOIN_WAIT_S = 120.0  # for the siblings to start
STOP_WAIT_S = 60.0  # a child's clean stop (flush, commit) before it is killed


def workers_count(text: str) -> int:
    """``--workers``: a count, or ``auto``: one node member per core but one (the job stage's), and
    no more than 3: the launch's one job stage reads ~2x what a node member reads per CPU-second
    (bench/results_throughput.md, issue 56's workers round), so a fourth would wait on it."""
    if text == "auto":
        return max(1, min((os.cpu_count() or 1) - 1, AUTO_MAX))
    return members_count(text, "--workers")


def members_count(text: str, flag: str = "--job-workers") -> int:
    """A count of members, at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{flag} takes a count{' or auto' if flag == '--workers' else ''}, not {text!r}"
        ) from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{flag} must be at least 1, not {n}")
    return n


def split_launch(args: argparse.Namespace) -> tuple[argparse.Namespace, list[tuple[argparse.Namespace, int]]]:
    """(this process's arguments, [(a kind of child's arguments, how many of them), ...]) for
    ``--workers N`` (and ``--job-workers M``: with ``--stage all``, the job stage's members, this
    process and M-1 children)."""
    job_workers = getattr(args, "job_workers", 1) or 1
    if args.stage == "all":
        base = args.group or GROUP  # faultlens-diagnose-node and -job by default, as run apart
        own = argparse.Namespace(**{**vars(args), "stage": "job", "group": f"{base}-job", "workers": 1, "job_workers": 1})
        node = argparse.Namespace(**{**vars(own), "stage": "node", "group": f"{base}-node"})
        kinds = [(node, args.workers), (argparse.Namespace(**vars(own)), job_workers - 1)]
    else:
        own = argparse.Namespace(**{**vars(args), "workers": 1, "job_workers": 1})
        kinds = [(argparse.Namespace(**vars(own)), args.workers - 1)]
    for child, _ in kinds:
        # One /metrics port per host: the launch serves it; the cap on records is the launch's.
        child.workers, child.metrics_port, child.max_records = 1, None, None
        if hasattr(child, "_parser"):
            del child._parser  # the CLI's parser (for its usage line) does not cross to a child
    return own, [(child, n) for child, n in kinds if n > 0]


class Members:
    """The launch's children, started on entry and stopped (SIGTERM, then a kill) on exit."""

    def __init__(self, args: argparse.Namespace, settings: KafkaSettings, run: Callable[..., int]) -> None:
        self.own_args, self._kinds = split_launch(args)
        self._run = run  # diagnose's own run (passed in: that module imports this one), pickled by name
        for child, _ in self._kinds:
            child.bootstrap = settings.bootstrap  # resolved once here (an embedded broker's address)
        self.count = sum(n for _, n in self._kinds)
        # Members of the launch's own stage and group join it with the launch (below: ready).
        self._with_launch = any(child.stage == self.own_args.stage for child, _ in self._kinds)
        self._procs: list = []
        self._stopping = threading.Event()
        self.failed: int | None = None  # a child's exit code, when one failed

    def __enter__(self) -> Members:
        # spawn, not fork: the launch's Kafka clients and threads are not to be copied
        ctx = multiprocessing.get_context("spawn")
        root = logging.getLogger()
        logs = (root.level, root.handlers[0].formatter if root.handlers else None, logging.getLogger("kafka").level)
        # Members join their groups together, once each is ready to poll (imports, topics, client:
        # seconds apart under load): a member that joined alone would read partitions that a later
        # one then takes over and re-reads (the runner's rebuild of retained input).
        together = self._together = ctx.Barrier(self.count + self._with_launch)  # held: the children open it by name
        # Set once every node-stage child stopped cleanly: the job stage's children then stop as
        # the launch does, once what those wrote last is read (GroupRunner.stop_when_drained).
        self._upstream_done = ctx.Event()
        # Per group, whether each member's bounded run is idle (--idle-stop): a member stops only
        # once all of its group are, or its partitions' new owner would read them all again.
        self._idle = {child.stage: ctx.Array("b", n + (child.stage == self.own_args.stage)) for child, n in self._kinds}
        for child, n in self._kinds:
            drained = self._upstream_done if child.stage == "job" and self._node_children() else None
            for i in range(n):
                p = ctx.Process(
                    target=_member,
                    args=(child, os.getpid(), logs, together, self._run, drained, (self._idle[child.stage], i)),
                    name=f"diagnose-{child.stage}-{i + 1}",
                    daemon=True,
                )
                p.start()
                self._procs.append(p)
        log.info(
            "started %s as child processes: %s",
            " and ".join(f"{n} {child.stage}-stage member(s)" for child, n in self._kinds),
            ", ".join(str(p.pid) for p in self._procs),
        )
        return self

    def _node_children(self) -> bool:
        return self.own_args.stage != "node" and any(child.stage == "node" for child, _ in self._kinds)

    def ready(self, runner: GroupRunner) -> None:
        """The launch's own member, right before it joins its group: with its siblings of that group."""
        if self._with_launch:
            flags = self._idle[self.own_args.stage]
            runner.idle_together = _idle_together(flags, len(flags) - 1)
            _wait_together(self._together)

    def watch(self, on_failure: Callable[[], None], on_done: Callable[[], None]) -> None:
        """Call ``on_failure`` (the launch's runner's stop) once a child exits with an error, and
        ``on_done`` once every child that writes what the launch reads stopped cleanly (the node
        stage's, or with a launch of one stage every child: their idle stop, say): the launch then
        reads what they wrote last and stops, without waiting for its own idle time, in which it
        would have named the stopped node stage in a telemetry_lost alert. The job stage's
        children are told the same at the same moment."""
        upstream = "node" if self._node_children() else self.own_args.stage

        def wait() -> None:
            pending = {p.sentinel: p for p in self._procs}
            writers = {p.sentinel for p in self._procs if p.name.startswith(f"diagnose-{upstream}-")}
            while pending and not self._stopping.is_set():
                for sentinel in multiprocessing.connection.wait(list(pending), timeout=1.0):
                    p = pending.pop(sentinel)
                    p.join()
                    if p.exitcode and not self._stopping.is_set():
                        log.error("%s (pid %d) exited with %s: stopping the launch", p.name, p.pid, p.exitcode)
                        self.failed = p.exitcode if p.exitcode > 0 else 1
                        on_failure()
                        return
                    writers.discard(sentinel)
                    if not writers and not self._upstream_done.is_set() and not self._stopping.is_set():
                        log.info("every %s-stage child stopped: the launch stops once it read what they wrote", upstream)
                        self._upstream_done.set()
                        on_done()

        threading.Thread(target=wait, name="diagnose-members", daemon=True).start()

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._together.abort()  # a child still waiting for a sibling that never came goes on to stop
        for p in self._procs:
            if p.is_alive():
                p.terminate()  # SIGTERM: a member's clean stop
        for p in self._procs:
            p.join(STOP_WAIT_S)
            if p.is_alive():
                log.error("%s (pid %d) did not stop within %.0fs: killed", p.name, p.pid, STOP_WAIT_S)
                p.kill()
                p.join()


def _idle_together(flags, slot: int) -> Callable[[bool], bool]:
    """A member's idle stop, held until every member of its group in the launch is idle too."""

    def together(due: bool) -> bool:
        flags[slot] = due
        return due and all(flags)

    return together


def _wait_together(together) -> None:
    try:
        together.wait(JOIN_WAIT_S)
    except threading.BrokenBarrierError:
        pass  # a sibling failed to start: the launch hears of it; this one reads meanwhile


def _member(args: argparse.Namespace, parent: int, logs: tuple, together, run: Callable[..., int], drained, idle: tuple) -> None:
    """A child: dies with the launch, logs as the launch does, runs one `diagnose` member (one of
    the job stage's stops once ``drained`` is set and what it holds is read)."""
    _die_with(parent)

    level, formatter, kafka_level = logs
    handler = logging.StreamHandler(sys.stderr)
    if formatter is not None:
        handler.setFormatter(formatter)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(level)
    logging.getLogger("kafka").setLevel(kafka_level)

    def ready(runner: GroupRunner) -> None:
        runner.idle_together = _idle_together(*idle)
        _wait_together(together)
        if drained is not None:

            def stop_when_upstream_done() -> None:
                drained.wait()
                runner.stop_when_drained()

            threading.Thread(target=stop_when_upstream_done, name="upstream-done", daemon=True).start()

    sys.exit(run(args, ready))


def _die_with(parent: int) -> None:
    libc = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    if libc is not None and ctypes.CDLL(libc, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM) == 0:
        if os.getppid() != parent:  # the launch died before the request took hold
            os.kill(os.getpid(), signal.SIGTERM)
        return

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
