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
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers takes a count or 'auto', not {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--workers must be at least 1, not {n}")
    return n


def split_launch(args: argparse.Namespace) -> tuple[argparse.Namespace, argparse.Namespace, int]:
    """(this process's arguments, each child's, how many children) for ``--workers N``."""
    if args.stage == "all":
        base = args.group or GROUP  # faultlens-diagnose-node and -job by default, as run apart
        own = argparse.Namespace(**{**vars(args), "stage": "job", "group": f"{base}-job", "workers": 1})
        child = argparse.Namespace(**{**vars(args), "stage": "node", "group": f"{base}-node"})
        children = args.workers
    else:
        own = argparse.Namespace(**{**vars(args), "workers": 1})
        child = argparse.Namespace(**vars(own))
        children = args.workers - 1
    # One /metrics port per host: the launch serves it; the cap on records is the launch's.
    child.workers, child.metrics_port, child.max_records = 1, None, None
    if hasattr(child, "_parser"):
        del child._parser  # the CLI's parser (for its usage line) does not cross to a child
    return own, child, children


class Members:
    """The launch's children, started on entry and stopped (SIGTERM, then a kill) on exit."""

    def __init__(self, args: argparse.Namespace, settings: KafkaSettings, run: Callable[..., int]) -> None:
        self.own_args, child, self.count = split_launch(args)
        self._run = run  # diagnose's own run (passed in: that module imports this one), pickled by name
        child.bootstrap = settings.bootstrap  # resolved once here (an embedded broker's address)
        self._child = child
        self._procs: list = []
        self._stopping = threading.Event()
        self.failed: int | None = None  # a child's exit code, when one failed

    def __enter__(self) -> Members:
        # spawn, not fork: the launch's Kafka clients and threads are not to be copied
        ctx = multiprocessing.get_context("spawn")
        root = logging.getLogger()
        logs = (root.level, root.handlers[0].formatter if root.handlers else None, logging.getLogger("kafka").level)
        # Children join their group together, once each is ready to poll (imports, topics, client:
        # seconds apart under load): a member that joined alone would read partitions that a later
        # one then takes over and re-reads (the runner's rebuild of retained input).
        together = self._together = ctx.Barrier(self.count)  # held: the children open it by name
        for i in range(self.count):
            p = ctx.Process(
                target=_member,
                args=(self._child, os.getpid(), logs, together, self._run),
                name=f"diagnose-{self._child.stage}-{i + 1}",
                daemon=True,
            )
            p.start()
            self._procs.append(p)
        log.info(
            "started %d %s-stage member(s) as child processes: %s",
            self.count,
            self._child.stage,
            ", ".join(str(p.pid) for p in self._procs),
        )
        return self

    def watch(self, on_failure: Callable[[], None], on_done: Callable[[], None]) -> None:
        """Call ``on_failure`` (the launch's runner's stop) once a child exits with an error, and
        ``on_done`` once every child stopped cleanly (their idle stop, say): the launch then reads
        what they wrote last and stops, without waiting for its own idle time, in which it would
        have named the stopped node stage in a telemetry_lost alert."""

        def wait() -> None:
            pending = {p.sentinel: p for p in self._procs}
            while pending and not self._stopping.is_set():
                for sentinel in multiprocessing.connection.wait(list(pending), timeout=1.0):
                    p = pending.pop(sentinel)
                    p.join()
                    if p.exitcode and not self._stopping.is_set():
                        log.error("%s (pid %d) exited with %s: stopping the launch", p.name, p.pid, p.exitcode)
                        self.failed = p.exitcode if p.exitcode > 0 else 1
                        on_failure()
                        return
            if not self._stopping.is_set():
                log.info("every %s-stage member stopped: this one stops once it read what they wrote", self._child.stage)
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


def _member(args: argparse.Namespace, parent: int, logs: tuple, together, run: Callable[..., int]) -> None:
    """A child: dies with the launch, logs as the launch does, runs one `diagnose` member."""
    _die_with(parent)

    level, formatter, kafka_level = logs
    handler = logging.StreamHandler(sys.stderr)
    if formatter is not None:
        handler.setFormatter(formatter)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(level)
    logging.getLogger("kafka").setLevel(kafka_level)

    def ready() -> None:
        try:
            together.wait(JOIN_WAIT_S)
        except threading.BrokenBarrierError:
            pass  # a sibling failed to start: the launch hears of it; this one reads meanwhile

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
