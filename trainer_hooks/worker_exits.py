"""A failed worker, told by `faultlens run` itself, so that a crash is diagnosed with no node agent.

torchrun's agent knows which worker died, its exit code or signal, and (when the worker recorded
it) its exception: torch reads each worker's error file (TORCHELASTIC_ERROR_FILE, written by
``@record``). Two halves:

- in the worker, :func:`record_uncaught` (the trainer hook installs it) writes that file for an
  uncaught exception as ``@record`` would, so the script needs no decorator;
- in the agent, :func:`failure_events` turns each failure into the lines a node agent following
  torchrun's output would have read (the exception's traceback and torch's "failed (exitcode: N)"
  line, each prefixed ``[rankN]:`` as torch prefixes a worker's output) and parses them with the
  node agent's own parser (parsing.registry), so the diagnosis rules judge them as they judge the
  node agent's: a CUDA error, a user exception, a signal.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, Callable, Mapping

from faultlens.events.envelope import Envelope, new_id

ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
TAIL_LINES = 80  # of a traceback: its innermost frames and the exception say what failed
_NO_TRACEBACK = "To enable traceback"  # torch's message for a worker that recorded nothing


def record_uncaught() -> None:
    """Make an uncaught exception of this worker reach its launcher: written to the error file
    torchrun names, as ``@record`` writes it (an existing file, ``@record``'s own, is kept), then
    handed to the previous excepthook (the traceback is printed as before)."""
    path = os.environ.get(ERROR_FILE_ENV)
    if not path or getattr(sys.excepthook, "faultlens", False):
        return
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        try:
            if not os.path.exists(path):
                stack = "".join(traceback.format_exception(kind, value, tb))
                with open(path, "w") as fp:
                    json.dump({"message": {"message": f"{kind.__name__}: {value}", "extraInfo": {
                        "py_callstack": stack, "timestamp": str(int(time.time()))}}}, fp)
        except OSError:
            pass  # the traceback still goes to stderr below
        previous(kind, value, tb)

    excepthook.faultlens = True  # type: ignore[attr-defined]
    sys.excepthook = excepthook


def error_text(failure: Any) -> str:
    """What a failed worker recorded (its traceback, else torch's one-line message), or ""."""
    message = getattr(failure, "message", "")
    if isinstance(message, Mapping):
        extra = message.get("extraInfo")
        stack = extra.get("py_callstack") if isinstance(extra, Mapping) else None
        return str(stack or message.get("message") or "")
    text = str(message or "")
    return "" if text.startswith(_NO_TRACEBACK) else text


def failure_lines(rank: int, failure: Any) -> list[str]:
    """The lines torchrun's output holds about one failed worker, prefixed with its rank."""
    tail = error_text(failure).splitlines()[-TAIL_LINES:]
    lines = [f"[rank{rank}]: {line}" for line in tail]
    lines.append(f"[rank{rank}]: torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
                 f"(exitcode: {failure.exitcode}) local_rank: {failure.local_rank} (pid: {failure.pid})")
    return lines


def exit_summary(rank: int, failure: Any) -> dict[str, Any]:
    """One worker's exit, for `faultlens run`'s JSON lines."""
    text = error_text(failure).strip().splitlines()
    code = int(failure.exitcode)
    return {"rank": rank, "local_rank": failure.local_rank, "pid": failure.pid, "exit_code": code,
            "signal": failure.signal_name() if code < 0 else None, "error": text[-1][:300] if text else None}


# What a worker says when a peer died under it: its own failure is an echo of the peer's.
_PEER_LOST = ("connection reset by peer", "connection closed by peer", "broken pipe", "remote process exited",
              "ncclremoteerror", "socket closed", "connection refused")


def sympathetic(failure: Any) -> bool:
    """A failure that only followed another's: a peer's loss in its error, or the launcher's own
    SIGTERM / SIGKILL of the workers left after the first one failed (torch stops them)."""
    if int(failure.exitcode) in (-15, -9) and not error_text(failure):
        return True
    text = error_text(failure).lower()
    return any(cue in text for cue in _PEER_LOST)


def failure_events(job: str, node: str, failures: Mapping[int, Any], parser_factory: Callable[[], Any] | None = None,
                   now: float | None = None) -> list[Envelope]:
    """The parsed events of every failed worker (rank → torch's ProcessFailure), the first to fail
    first: a worker that failed on its own (an exception, a signal, an exit with no word) before
    one that only lost its peer (diagnosis/rules/comms.py decides an incident on its first hard
    report), then by the time torch has for each, then rank. torch polls its workers every
    --monitor-interval and sees them all dead at once: the order of their deaths is not kept."""
    from faultlens.parsing.registry import parser_for, to_envelope

    make = parser_factory or (lambda: parser_for("nccl", None))
    ts = time.time() if now is None else now
    out: list[Envelope] = []
    order = sorted(failures.items(), key=lambda kv: (sympathetic(kv[1]), getattr(kv[1], "timestamp", 0), kv[0]))
    for rank, failure in order:
        parser = make()  # one per rank: a traceback is joined across its lines
        parsed: list[Any] = []
        for line in failure_lines(rank, failure):
            parsed += parser.feed(line) or []
        parsed += parser.flush() or []
        wordless = int(failure.exitcode) > 0 and not error_text(failure)
        for p in parsed:
            if wordless and p.kind == "worker_failed":
                # It died with no error of its own (os._exit, a C library's exit): the launcher's
                # word is all there is, and diagnosis/rules/comms.py takes it as a hard report.
                p.data["wordless"] = True
            out.append(to_envelope(p, job=job, node=node, ts=ts, event_id=new_id()))
    return out
