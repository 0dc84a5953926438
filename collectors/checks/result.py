"""The outcome of one check, and the timeout every check runs under."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class CheckResult:
    """``skipped`` checks count as passed: a node without NVML is not a failing node.
    ``inconclusive``: the check itself broke (our bug, a missing library), which says nothing about
    the machine; it does not pass, and remediation never evicts on it alone."""

    name: str
    passed: bool
    detail: str
    duration_s: float = 0.0
    skipped: bool = False
    inconclusive: bool = False
    timed_out: bool = False  # gave no answer within its timeout (left behind in its thread)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "passed": self.passed, "skipped": self.skipped, "inconclusive": self.inconclusive,
               "detail": self.detail, "duration_s": round(self.duration_s, 3)}
        if self.timed_out:
            out["timed_out"] = True
        return out


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, True, f"skipped: {why}", skipped=True)


def run_with_timeout(name: str, fn: Callable[[], CheckResult], timeout_s: float) -> CheckResult:
    """``fn()`` with its duration, or a failure once ``timeout_s`` passes.

    The check runs in a daemon thread: a check stuck in a driver call cannot be killed from
    Python, so it is left behind rather than holding up the other checks and the answer. A
    timeout is a failure: every check is short, so one that outlives its timeout hangs in the
    driver or the device. A check that raises is inconclusive, with the error as its detail (a
    broken check says so; it never passes silently and never takes the agent down).
    """
    box: list[CheckResult] = []
    start = time.monotonic()

    def target() -> None:
        try:
            box.append(fn())
        except Exception as exc:  # noqa: BLE001 - any error of a check is its result
            box.append(CheckResult(name, False, f"check could not run: {type(exc).__name__}: {exc}", inconclusive=True))

    thread = threading.Thread(target=target, name=f"check-{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    took = time.monotonic() - start
    if not box:
        return CheckResult(name, False, f"timed out after {timeout_s:g}s", took, timed_out=True)
    r = box[0]
    return CheckResult(r.name, r.passed, r.detail, took, r.skipped, r.inconclusive)
