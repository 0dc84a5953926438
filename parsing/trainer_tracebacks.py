"""A Python traceback in a trainer's log, assembled line by line and judged at its exception line.

The trainer parser (parsing.trainer_log) keeps one :class:`Traceback` open per rank prefix, since
torchrun's ranks interleave their output; :func:`step` says what a line does to it and
:func:`judge_traceback` reads the exception it ended with (or that it was cut off) into an event's
data. Pure functions over the record: folding its echoes with the errors just reported is the
parser's, which knows what was reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from faultlens.parsing import signals
from faultlens.parsing.cuda_errors import classify_cuda
from faultlens.parsing.errors import USER_TYPES, classify_nccl, nccl_fault
from faultlens.parsing.exception_subject import read_subject
from faultlens.parsing.exceptions import judge
from faultlens.parsing.line import MAX_KEPT, common

# A traceback that sees this many foreign lines before its exception line is given up as truncated.
PATIENCE = 32
MAX_FRAMES = 256

START = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<lineno>\d+)(?:, in (?P<func>.+))?')
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
_EXC_SUFFIXES = ("Error", "Exception", "Interrupt", "Exit", "Failure", "Warning", "Timeout", "StopIteration")
_LIBRARY = re.compile(r"site-packages|dist-packages|/torch/|/lib/python\d(?:\.\d+)?/|\\lib\\|^<frozen|^<")


def starts(msg: str) -> bool:
    """Is this line a traceback's header?"""
    return msg.startswith(START) or (START in msg and msg.strip() == START)


@dataclass
class Traceback:
    rank: int | None
    local_rank: int | None
    ts: float | None
    mono: float | None
    lines: list[str] = field(default_factory=list)
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    idle: int = 0
    size: int = 0
    last: str = ""

    def add(self, raw: str) -> None:
        self.last = raw  # the exception line is kept even when the record outgrew MAX_KEPT
        if self.size < MAX_KEPT:
            self.lines.append(raw)
            self.size += len(raw) + 1


@dataclass(frozen=True)
class Step:
    """What one line did to an open traceback: ``absorbed`` it; ``closed`` it, with the exception
    (``etype``, ``message``) or cut off (``truncated``: a new header, or too many foreign lines)."""

    absorbed: bool
    closed: bool = False
    etype: str | None = None
    message: str | None = None
    truncated: bool = False


def step(tb: Traceback, msg: str, raw: str) -> Step:
    fm = _FRAME.match(msg)
    if fm:
        tb.add(raw)
        if len(tb.frames) >= MAX_FRAMES:
            tb.frames.pop(0)
        tb.frames.append((fm.group("file"), int(fm.group("lineno")), (fm.group("func") or "").strip()))
        tb.idle = 0
        return Step(True)
    if not msg.strip() or msg[0] in " \t":
        tb.add(raw)  # source lines, ^^^^ markers, "[Previous line repeated N more times]"
        return Step(True)
    em = _EXC.match(msg.strip())
    if em and tb.frames and em.group("type").rsplit(".", 1)[-1].endswith(_EXC_SUFFIXES):
        tb.add(raw)
        return Step(True, True, em.group("type"), (em.group("msg") or "").strip())
    if msg.startswith(START):
        return Step(False, True, truncated=True)
    tb.idle += 1
    if tb.idle > PATIENCE:
        return Step(False, True, truncated=True)
    return Step(False)


def judge_traceback(tb: Traceback, etype: str | None, message: str | None, truncated: bool = False) -> dict[str, Any]:
    """The ``exception`` event's data: the class the exception names (a CUDA or NCCL error first,
    then parsing/exceptions.toml's verdict, a signal it reports, then whose frame raised it).
    ``error`` in it (a CUDA / NCCL error's name) asks the parser for that error's own event too."""
    user_frames = [f for f in tb.frames if not _LIBRARY.search(f[0])]
    innermost = tb.frames[-1] if tb.frames else None
    frame = user_frames[-1] if user_frames else innermost
    text = f"{etype or ''}: {message or ''}"
    cuda = classify_cuda(text)
    nccl = None if cuda else classify_nccl(text) or ("nccl" if etype and "DistBackendError" in etype else None)
    short = (etype or "").rsplit(".", 1)[-1]
    user_code = False
    extra: dict[str, Any] = {}
    verdict = None if truncated or cuda or nccl else judge(etype, message or "")
    # An exception that reports a process killed by a signal (a DataLoader worker's segfault,
    # torch.multiprocessing's "terminated with signal"): the signal says what broke.
    died = None if truncated or cuda or nccl or verdict else signals.read_signal(message or "", "")
    if truncated:
        fault, action, severity = "unknown", "stop_time_diagnosis", "warn"
    elif cuda:
        extra["error"], fault, action, severity = cuda
        user_code = fault == "user_code"
    elif nccl:
        extra["error"] = nccl
        fault, action = nccl_fault(nccl)
        severity = "error"
    elif verdict is not None:
        # The machine's trouble (a full or failing disk, host memory) even when a frame of the
        # program's own raised it: the errno and the message say what broke.
        fault, action, severity = verdict.fault, verdict.action, "error"
        extra["judged_by"] = verdict.why
        if verdict.errno:
            extra["errno"] = verdict.errno
    elif died:
        signal_data = died[0][1]
        fault, action, severity = signal_data["fault"], signal_data["action"], signal_data["severity"]
        extra["signal"] = signal_data["signal"]
    elif short == "ChildFailedError":
        # torchrun's summary of a rank that already failed: the rank's own traceback is the evidence.
        fault, action, severity = "unknown", "none", "info"
        extra["sympathetic"] = True
    else:
        innermost_is_user = innermost is not None and not _LIBRARY.search(innermost[0])
        user_code = innermost_is_user or (bool(user_frames) and short in USER_TYPES)
        fault, action, severity = ("user_code", "rollback", "error") if user_code else ("unknown", "stop_time_diagnosis", "error")
        subject = None if user_code else read_subject(etype, message or "")
        if subject:
            # a generic type whose own words name the component that failed (parsing/exception_subject.py)
            fault, action = subject[0], subject[1]
            extra["judged_by"] = subject[2]
    data = common(
        "\n".join(tb.lines), fault, action, severity,
        rank=tb.rank, type=etype, message=(message or "")[:1024],
        file=frame[0] if frame else None, lineno=frame[1] if frame else None, func=frame[2] if frame else None,
        user_code=user_code, frames=len(tb.frames), **extra,
    )  # fmt: skip
    if tb.local_rank is not None:
        data["local_rank"] = tb.local_rank
    if truncated:
        data["truncated"] = True
    return data
