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
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SECONDS_FILE = Path(__file__).resolve().parent / "file_seconds.json"


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


class _Stopwatch:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        f = _file_of(report.nodeid)
        self.seconds[f] = self.seconds.get(f, 0.0) + report.duration

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
