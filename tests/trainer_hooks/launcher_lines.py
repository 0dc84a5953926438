"""Reading a launcher's JSON lines from a test: follow its stdout, wait for one event."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterable
from pathlib import Path

from tests.progress import files_size, wait_until


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


def until(lines: queue.Queue, event: str, stall_s: float, seen: list, *, watch: Iterable[Path] = (),
          limit_s: float = 1800.0) -> dict:
    """The next line whose ``event`` is ``event``; every line read is appended to ``seen``.

    Waited for while the launcher moves (tests/progress.py): a line it prints, or the files under
    ``watch`` growing (its trainers' logs and checkpoints); it fails once neither moved for
    ``stall_s``, never because a busy machine made the job slow."""
    watched = [Path(p) for p in watch]
    found: list[dict] = []

    def arrived() -> bool:
        while True:
            try:
                line = lines.get_nowait()
            except queue.Empty:
                return False
            seen.append(line)
            if line.get("event") == event:
                found.append(line)
                return True

    wait_until(arrived, progress=lambda: (len(seen), files_size(*watched)), stall_s=stall_s, limit_s=limit_s,
               what=f"the launcher's {event!r} line", poll_s=0.2,
               explain=lambda: f"saw {[line.get('event') for line in seen]}")
    return found[0]
