"""The exception at the end of a traceback, judged by its type, its errno and its message
(parsing/exceptions.toml): ENOSPC and EIO are the disk's, a killed DataLoader worker is the host's
memory, whatever the words around them or the prefix before them.

Types are followed through Python's class hierarchy (``IsADirectoryError`` is an ``OSError``), and
an errno is found as ``[Errno 28]``, as its name or as the system's own text for it.
"""

from __future__ import annotations

import builtins
import errno as errno_mod
import os
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES

TABLE = Path(__file__).resolve().parent / "exceptions.toml"
_ERRNO = re.compile(r"\[Errno (-?\d+)\]|\berrno[ =:]+(-?\d+)|\b(E[A-Z]{2,15})\b")


@dataclass(frozen=True, slots=True)
class Verdict:
    fault: str
    action: str
    why: str
    errno: str | None = None


@dataclass(frozen=True)
class ExceptionTable:
    by_errno: dict[str, tuple[str, str]]
    by_type: dict[str, tuple[str, str]]
    messages: tuple[tuple[str, re.Pattern[str], str, str], ...]
    after_errno: tuple[tuple[str, re.Pattern[str], str, str], ...]  # messages an errno in the line overrides
    strerror: tuple[tuple[str, str], ...]  # (text, errno name), longest text first


def _check(where: str, fault: object, action: object) -> tuple[str, str]:
    if fault not in FAULT_CLASSES or action not in ACTIONS:
        raise ValueError(f"{where}: fault {fault!r} / action {action!r} not a fault class / action")
    return str(fault), str(action)


@lru_cache(maxsize=1)
def table() -> ExceptionTable:
    doc = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    by_errno = {name: _check(f"errno.{name}", v.get("fault"), v.get("action")) for name, v in doc.get("errno", {}).items()}
    by_type = {name: _check(f"type.{name}", v.get("fault"), v.get("action")) for name, v in doc.get("type", {}).items()}
    def read(m: dict[str, str]) -> tuple[str, re.Pattern[str], str, str]:
        return (m["id"], re.compile(m["pattern"]), *_check(f"message {m['id']}", m.get("fault"), m.get("action")))

    messages = tuple(read(m) for m in doc.get("message", ()) if not m.get("after_errno"))
    after_errno = tuple(read(m) for m in doc.get("message", ()) if m.get("after_errno"))
    strerror = sorted(((os.strerror(getattr(errno_mod, n)), n) for n in by_errno if hasattr(errno_mod, n)), key=lambda t: -len(t[0]))
    return ExceptionTable(by_errno, by_type, messages, after_errno, tuple(strerror))


def _errno_name(message: str, t: ExceptionTable) -> str | None:
    for m in _ERRNO.finditer(message):
        if m.group(3):
            if m.group(3) in t.by_errno:
                return m.group(3)
            continue
        code = abs(int(m.group(1) or m.group(2)))
        name = errno_mod.errorcode.get(code)
        if name in t.by_errno:
            return name
    for text, name in t.strerror:
        if text in message:
            return name
    return None


def _lineage(etype: str) -> list[str]:
    """The short type name and, for Python's own types, its base classes' names."""
    short = etype.rsplit(".", 1)[-1]
    cls = getattr(builtins, short, None)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        return [c.__name__ for c in cls.__mro__ if c not in (object,)]
    return [short]


def judge(etype: str | None, message: str) -> Verdict | None:
    """What the exception says about the machine (or the training's numbers), or None when it says
    nothing this table knows."""
    t = table()
    # Messages that name the cause first (ENOSPC on torch's shared-memory file is host memory, not
    # a disk); then the errno; then the messages that yield to it (a checkpoint write that says
    # ENOSPC or EIO is that errno's, whatever the writer's own words).
    for mid, pattern, fault, action in t.messages:
        if pattern.search(message):
            return Verdict(fault, action, f"message {mid}")
    name = _errno_name(message, t)
    if name is not None:
        fault, action = t.by_errno[name]
        return Verdict(fault, action, f"errno {name}", name)
    for mid, pattern, fault, action in t.after_errno:
        if pattern.search(message):
            return Verdict(fault, action, f"message {mid}")
    for short in _lineage(etype or ""):
        if short in t.by_type:
            fault, action = t.by_type[short]
            return Verdict(fault, action, f"type {short}")
    return None
