"""Reading a launcher's JSON lines from a test: follow its stdout, wait for one event."""

from __future__ import annotations

import json
import queue
import threading
import time


def follow(proc) -> queue.Queue:
    """A queue of the JSON objects ``proc`` prints (a thread reads its stdout; other lines are skipped)."""
    out: queue.Queue = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            try:
                out.put(json.loads(line))
            except ValueError:
                pass

    threading.Thread(target=read, daemon=True).start()
    return out


def until(lines: queue.Queue, event: str, timeout_s: float, seen: list) -> dict:
    """The next line whose ``event`` is ``event``; every line read is appended to ``seen``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        seen.append(line)
        if line.get("event") == event:
            return line
    raise AssertionError(f"no {event!r} from the launcher; saw {[l.get('event') for l in seen]}")
