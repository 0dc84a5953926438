"""The order pytest-xdist hands test files to its workers: the longest first.

``--dist loadfile --no-loadscope-reorder`` gives each worker the next file in collection order (at
the start, a second one queued behind its first). Sorted by test count (xdist's default) or by path,
minute-long files with one test came last and the suite waited on them alone at the end: 610 s on
CI's 2 cores for 2,440 s of tests over 5 workers. Longest first, each worker ends within about one
short file of the others.

A file's seconds are read from ``tests/file_seconds.json`` (updated by a run with
``--store-file-seconds``: every test's setup, call and teardown, added up per file); a file not
there yet counts its tests' ``long(seconds)`` marks, or a tenth of a second a test. The seconds
only order the files; nothing is asserted of them, and stale ones cost time, never a result.

The same run says, at its end, the CPU seconds of the files that took the most and of the whole
suite, beside its wall time: on CI's two cores a suite that computes more than twice its wall
time cannot go faster with more workers, one that waits can. A test's CPU is what the worker
process and the children it reaped spent from its setup to its teardown (a thread or a child a
test left running is counted in the tests after it; a child never reaped, as the session's
broker until the end, not at all).
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest

SECONDS_FILE = Path(__file__).resolve().parent / "file_seconds.json"
CPU_KEY = "cpu_s"  # the user property a phase's report carries its CPU seconds in (xdist sends it on)
TOP_FILES = 15


def _file_of(nodeid: str) -> str:
    return nodeid.partition("::")[0]


def _known_seconds() -> dict[str, float]:
    try:
        table = json.loads(SECONDS_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {f: float(s) for f, s in table.items() if isinstance(s, (int, float))} if isinstance(table, dict) else {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-file-seconds", action="store_true",
                     help=f"write each test file's seconds in this run to {SECONDS_FILE.name} (the file order)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    known = _known_seconds()
    guess: dict[str, float] = {}
    for item in items:
        mark = item.get_closest_marker("long")
        seconds = float(mark.args[0]) if mark is not None and mark.args else 0.1
        guess[_file_of(item.nodeid)] = guess.get(_file_of(item.nodeid), 0.0) + seconds
    weight = {f: known.get(f, s) for f, s in guess.items()}
    items.sort(key=lambda item: -weight[_file_of(item.nodeid)])  # stable: a file's tests keep their order


def _cpu_now() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class _CpuClock:
    """In the process that runs the tests: each phase's report carries the CPU seconds spent since
    the phase before it (the first: since the test's start)."""

    def __init__(self) -> None:
        self._last = _cpu_now()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item):
        self._last = _cpu_now()
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        outcome = yield
        now = _cpu_now()
        outcome.get_result().user_properties.append((CPU_KEY, now - self._last))
        self._last = now


class _Stopwatch:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        f = _file_of(report.nodeid)
        self.seconds[f] = self.seconds.get(f, 0.0) + report.duration
        cpu = dict(report.user_properties).get(CPU_KEY)
        if isinstance(cpu, (int, float)):
            self.cpu[f] = self.cpu.get(f, 0.0) + cpu

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.cpu or hasattr(terminalreporter.config, "workerinput"):
            return
        wall = time.monotonic() - self.started
        total = sum(self.cpu.values())
        terminalreporter.write_line(f"file seconds: {total:.0f} CPU-s in {wall:.0f} s of wall ({total / wall:.2f} "
                                    f"cores busy); the test files' own seconds {sum(self.seconds.values()):.0f}")
        for f, cpu in sorted(self.cpu.items(), key=lambda kv: -kv[1])[:TOP_FILES]:
            terminalreporter.write_line(f"  {cpu:7.1f} CPU-s {self.seconds.get(f, 0.0):7.1f} s  {f}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.seconds or hasattr(session.config, "workerinput"):
            return  # xdist's workers: the controller hears every report and writes once
        # Merged into what is known: a run of a few files updates those files only.
        merged = {**_known_seconds(), **{f: round(s, 1) for f, s in self.seconds.items()}}
        table = dict(sorted(merged.items(), key=lambda kv: -kv[1]))
        SECONDS_FILE.write_text(json.dumps(table, indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--store-file-seconds", default=False):
        config.pluginmanager.register(_Stopwatch(), "file-seconds-stopwatch")
        config.pluginmanager.register(_CpuClock(), "file-seconds-cpu-clock")
