"""Parse one process's stack dump (``py-spy dump`` or Python's faulthandler) and pick its training thread.

Both tools print the innermost frame first. py-spy::

    Process 1234: python train.py
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 1234 (idle): "MainThread"
        all_gather_into_tensor (torch/distributed/distributed_c10d.py:2876)
            Arguments:
                tensor: <Tensor at 0x7f...>
        <module> (train.py:12)

faulthandler::

    Thread 0x00007f3a... (most recent call first):
      File "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2876 in all_gather_into_tensor

``py-spy dump --json`` prints the same threads as a JSON list (benfred/py-spy src/stack_trace.rs,
``StackTrace``: ``thread_name``, ``os_thread_id``, ``active``, ``owns_gil``, ``frames`` innermost
first, each ``name``, ``filename``, ``short_filename``, ``line``); an agent of another make may
send that. It reads into the same threads, the status as py-spy's text would print it.

Parsing never raises: unknown lines are skipped, a dump whose last line is no frame (cut off
mid-write) marks its last thread ``truncated``, and text with no thread at all parses to ``[]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

_PYSPY_THREAD = re.compile(r'^Thread\s+(0x[0-9a-fA-F]+|\d+)(?:\s+\(([^)]*)\))?(?::\s*"(.*)")?\s*$')
_PYSPY_FRAME = re.compile(r"^\s+(\S.*?) \(([^()]*?)(?::(\d+))?\)\s*$")
_FH_THREAD = re.compile(r"^(Current thread|Thread)\s+(0x[0-9a-fA-F]+)\s+\(most recent call first\):\s*$")
_FH_STACK = re.compile(r"^Stack\s+\(most recent call first\):\s*$")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (.+?)\s*$')
_LOCALS_HEADER = frozenset({"Arguments:", "Locals:"})
_PATH_PREFIX = re.compile(r"^.*(?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/")

# Threads that are never the training loop: the trainer hook's command listener (which runs
# faulthandler, so its own frames are the dumper's), heartbeats, and torch's own watchdogs.
_IGNORED_THREAD = re.compile(r"listener|heartbeat|faultlens|watchdog|pt_elastic|monitor", re.I)
# torch's DataLoader helper loops run beside the training loop in the trainer's process (the pin
# memory thread; a worker's loop where workers are threads): they hold torch frames, so a main
# thread with none (a JAX trainer fed by a torch DataLoader) lost to them on the count.
_HELPER_LOOPS = frozenset({"_pin_memory_loop", "_worker_loop"})


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    file: str  # as shown by the tool, library prefixes stripped (torch/distributed/distributed_c10d.py)
    line: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        """What identifies a frame across ranks, tools and library versions: no line, no class prefix.

        py-spy prints ``Thread.run`` where faulthandler prints ``run``, and a user file's path
        depends on where the job was unpacked, so function basename + file basename it is.
        """
        function = "?" if self.function.startswith("0x") else self.function.rsplit(".", 1)[-1]  # native address
        return (function, self.file.rsplit("/", 1)[-1])

    def __str__(self) -> str:
        return f"{self.function} ({self.file})"


@dataclass(frozen=True, slots=True)
class ThreadStack:
    thread_id: str
    name: str | None  # py-spy's thread name; faulthandler has none
    frames: tuple[Frame, ...]  # innermost first
    status: str | None = None  # py-spy's idle / active / gil markers
    current: bool = False  # faulthandler's "Current thread": the one that ran the dump
    tool: str = "py-spy"
    truncated: bool = False

    @property
    def is_main(self) -> bool:
        if self.name is not None:
            return self.name == "MainThread"
        # faulthandler names no thread; threads started by `threading` bottom out in _bootstrap.
        return bool(self.frames) and self.frames[-1].key[0] != "_bootstrap" and not self.current

    @property
    def torch_frames(self) -> int:
        return sum(1 for f in self.frames if f.file.startswith("torch/") or "/torch/" in f.file)


@lru_cache(maxsize=4096)
def short_path(path: str) -> str:
    """The path py-spy would print: everything up to site-packages (or the stdlib dir) dropped."""
    path = path.replace("\\", "/")
    stripped = _PATH_PREFIX.sub("", path, count=1)
    return stripped or path


def parse_dump(text: str) -> list[ThreadStack]:
    """Every thread of a py-spy (text or ``--json``) or faulthandler dump (several processes' text
    dumps may be concatenated)."""
    if not isinstance(text, str) or not text.strip():
        return []
    if text.lstrip()[:1] in "[{":
        from_json = _parse_json(text)
        if from_json is not None:
            return from_json
    lines = text.splitlines()
    threads: list[ThreadStack] = []
    head: dict | None = None
    frames: list[Frame] = []
    in_locals = False
    bad_tail = False  # the last line seen inside a thread did not parse

    def close(truncated: bool = False) -> None:
        nonlocal head, frames
        if head is not None:
            threads.append(ThreadStack(frames=tuple(frames), truncated=truncated, **head))
        head, frames = None, []

    for raw in lines:
        line = raw.rstrip()
        if not line.strip():
            in_locals = False
            continue
        # Frames (indented) are most lines: only unindented lines can open a thread.
        m = None if line[0] in " \t" else _PYSPY_THREAD.match(line)
        if m:
            close()
            status = (m.group(2) or "").strip() or None
            head = {"thread_id": m.group(1), "name": m.group(3), "status": status, "tool": "py-spy"}
            in_locals = bad_tail = False
            continue
        m = None if line[0] in " \t" else _FH_THREAD.match(line)
        if m or (line[0] not in " \t" and _FH_STACK.match(line)):
            close()
            current = m is not None and m.group(1) == "Current thread"
            head = {"thread_id": m.group(2) if m else "-", "name": None, "current": current, "tool": "faulthandler"}
            in_locals = bad_tail = False
            continue
        if head is None:
            continue  # "Process ...", "Python v...", "Fatal Python error", noise before a thread
        stripped = line.strip()
        if head["tool"] == "py-spy":
            if stripped in _LOCALS_HEADER:
                in_locals = True
                continue
            indent = len(line) - len(line.lstrip())
            if in_locals and indent > 4:
                continue
            m = _PYSPY_FRAME.match(line)
            if m and indent <= 4:
                in_locals = False
                frames.append(Frame(m.group(1), short_path(m.group(2)), int(m.group(3)) if m.group(3) else None))
                bad_tail = False
                continue
        else:
            m = _FH_FRAME.match(line)
            if m:
                lineno = int(m.group(2)) if m.group(2).isdigit() else None
                frames.append(Frame(m.group(3), short_path(m.group(1)), lineno))
                bad_tail = False
                continue
            if stripped in ("<no Python frame>", "..."):
                continue
        bad_tail = True
    # A dump cut off mid-write ends in a line that is no frame: its last thread is incomplete.
    close(truncated=bad_tail)
    return threads


def _parse_json(text: str) -> list[ThreadStack] | None:
    """``py-spy dump --json``: a list of threads (or one); None when the text is no such JSON."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    items = obj if isinstance(obj, list) else [obj]
    if not items or not all(isinstance(t, dict) and isinstance(t.get("frames"), list) for t in items):
        return None
    threads = []
    for t in items:
        frames = []
        for f in t["frames"]:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                continue
            path = f.get("short_filename") or f.get("filename")
            line = f.get("line")
            frames.append(Frame(f["name"], short_path(path if isinstance(path, str) else ""),
                                line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else None))
        tid = t.get("os_thread_id") or t.get("thread_id")
        name = t.get("thread_name")
        # py-spy's status_str: idle unless active, "+gil" when it holds the GIL.
        status = "idle" if t.get("active") is False else ("active+gil" if t.get("owns_gil") else "active")
        threads.append(ThreadStack(thread_id=str(tid), name=name if isinstance(name, str) else None,
                                   frames=tuple(frames), status=status, tool="py-spy"))
    return threads


def training_thread(threads: list[ThreadStack]) -> ThreadStack | None:
    """The thread running the training loop: MainThread when it is in torch, else the most torch frames.

    The faulthandler dumper (``current``), listener / heartbeat threads and DataLoader helper loops
    are never chosen.
    """
    candidates = [
        t for t in threads
        if t.frames and not t.current and not (t.name and _IGNORED_THREAD.search(t.name))
        and not any(f.key[0] in _HELPER_LOOPS for f in t.frames)
    ]
    if not candidates:
        return None
    main = next((t for t in candidates if t.is_main), None)
    if main is not None and main.torch_frames:
        return main
    torchy = max(candidates, key=lambda t: (t.torch_frames, len(t.frames)))
    if torchy.torch_frames:
        return torchy
    return main or max(candidates, key=lambda t: len(t.frames))
