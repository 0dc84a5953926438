"""Kafka clients a test leaves running: always an error at that test's teardown.

A kafka-python client runs its own threads (an IO loop ``kafka-io-<client id>``, a producer's
``<client id>-network-thread``) until it is closed. One a test forgets keeps reconnecting after
its broker is gone, and logs ``kafka.net.manager ... ECONNREFUSED`` ERROR records into the caplog
of whichever test the same xdist worker runs next (CI at 77f095b: test_whatif_inputs failed on
three of them). So after each test's teardown, a kafka thread that appeared during it and is
still alive fails it. A thread a module- or class-scoped fixture started is judged when that
fixture's scope ends (pytest tears it down with the last test of the module), so a shared client
is no leak; the session broker's readiness check closes its client before any test. The check is
``threading.enumerate()`` once per test: microseconds.

``--report-leaks PATH`` (a run that looks for leaks, not CI's) also appends to PATH, one line
each, every other thread and every child process a test leaves alive past its scope: a
subprocess a test started and never reaped, a pool a fixture never shut. The session broker
(tests/kafka_fixtures.py) is a child the whole session and is not named.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

SESSION_CHILDREN: set[int] = set()  # pids of children meant to outlive every test (the session broker)
_GRACE_S = 2.0  # a client closed from another thread may take a moment to join its IO thread


def _is_kafka(thread: threading.Thread) -> bool:
    target = getattr(thread, "_target", None)
    module = getattr(target, "__module__", None) or type(thread).__module__
    return module.startswith("kafka.") or thread.name.startswith("kafka-")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--report-leaks", metavar="PATH", default=None,
                     help="append every thread and child process a test leaves alive past its scope to PATH")


class _Pending:
    """What appeared during a test and was still alive after its teardown, with the node (module,
    class, session) of the wider-scoped fixture that started it, if one did: it is judged when that
    node is torn down; anything else, at once."""

    def __init__(self, nodeid: str, owner: object | None) -> None:
        self.nodeid = nodeid
        self.owner = owner


class LeakCheck:
    def __init__(self, report: Path | None) -> None:
        self.report = report
        self.threads: dict[threading.Thread, _Pending] = {}
        self.children: dict[object, _Pending] = {}
        self._before_threads: set[threading.Thread] = set()
        self._before_children: set[object] = set()
        self._fixture_made: dict[object, object] = {}  # thread or child -> the module/class/session node of its fixture

    def _children(self) -> set[object]:
        if self.report is None:
            return set()
        import psutil

        try:
            kids = psutil.Process().children(recursive=True)
        except psutil.Error:
            return set()
        return {k for k in kids if k.pid not in SESSION_CHILDREN}

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        if fixturedef.scope == "function":
            return (yield)
        threads, kids = set(threading.enumerate()), self._children()
        try:
            return (yield)
        finally:
            for new in (set(threading.enumerate()) - threads) | (self._children() - kids):
                self._fixture_made[new] = request.node

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        self._before_threads = set(threading.enumerate())
        self._before_children = self._children()
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        result = yield
        for t in set(threading.enumerate()) - self._before_threads:
            if t not in self.threads and (_is_kafka(t) or self.report is not None):
                self.threads[t] = _Pending(item.nodeid, self._fixture_made.pop(t, None))
        for k in self._children() - self._before_children:
            self.children.setdefault(k, _Pending(item.nodeid, self._fixture_made.pop(k, None)))
        still_set_up = set(nextitem.listchain()) if nextitem is not None else set()
        leaked = self._due(self.threads, lambda t: t.is_alive(), still_set_up)
        gone = self._due(self.children, _running, still_set_up)
        kafka = [(t, p) for t, p in leaked if _is_kafka(t)]
        if kafka:  # give a closing client its moment, then judge again
            deadline = time.monotonic() + _GRACE_S
            while any(t.is_alive() for t, _ in kafka) and time.monotonic() < deadline:
                time.sleep(0.05)
            kafka = [(t, p) for t, p in kafka if t.is_alive()]
        self._write([f"thread {t.name} (alive) from {p.nodeid}{_where(t)}" for t, p in leaked if t.is_alive()]
                    + [f"child {k.pid} {_cmdline(k)} from {p.nodeid}" for k, p in gone])
        if kafka:
            names = ", ".join(f"{t.name} (from {p.nodeid})" for t, p in kafka)
            raise AssertionError(f"kafka client threads left running (close the client in a finally or a "
                                 f"fixture's teardown): {names}")
        return result

    @staticmethod
    def _due(pending: dict, alive, still_set_up: set) -> list:
        """Pop every entry whose owner is torn down: those still alive are leaks."""
        due = []
        for key, p in list(pending.items()):
            if not alive(key):
                del pending[key]
            elif p.owner is None or p.owner not in still_set_up:
                del pending[key]
                due.append((key, p))
        return due

    def _write(self, lines: list[str]) -> None:
        if self.report is not None and lines:
            with self.report.open("a") as f:
                f.writelines(line + "\n" for line in lines)


def _where(thread: threading.Thread) -> str:
    """Where a leaked thread is now: the innermost frames, for the report."""
    import sys
    import traceback

    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return ""
    return "\n    " + "    ".join(traceback.format_stack(frame)[-10:]).rstrip()


def _running(proc) -> bool:
    try:
        return proc.is_running() and proc.status() != "zombie"
    except Exception:  # psutil.NoSuchProcess: it ended meanwhile
        return False


def _cmdline(proc) -> str:
    try:
        return " ".join(proc.cmdline())[:200]
    except Exception:  # the process ended meanwhile: its pid says enough
        return "?"


def pytest_configure(config: pytest.Config) -> None:
    report = config.getoption("--report-leaks")
    config.pluginmanager.register(LeakCheck(Path(report) if report else None), "faultlens-leak-check")
