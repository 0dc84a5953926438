"""A failed worker, told by `faultlens run` itself, so that a crash is diagnosed with no node agent.

torchrun's agent knows which worker died, its exit code or signal, and (when the worker recorded
it) its exception: torch reads each worker's error file (TORCHELASTIC_ERROR_FILE, written by
``@record``). Two halves:

- in the worker, :func:`record_uncaught` (the trainer hook installs it) writes that file for an
  uncaught exception as ``@record`` would, so the script needs no decorator;
- in the agent, :func:`failure_events` turns each failure into the lines a node agent following
  torchrun's output would have read (the exception's traceback and torch's "failed (exitcode: N)"
  line, each prefixed ``[rankN]:`` as torch prefixes a worker's output) and parses them with the
  node agent's own parser, handed in by `faultlens run` (parsing sits above the trainer hooks'
  layer), so the diagnosis rules judge them as they judge the node agent's: a CUDA error, a user
  exception, a signal.

Each event is stamped with when its worker died (:func:`died_at`), not when its agent reported it:
the diagnosis reads the job's events in event-time order across nodes, so with several nodes'
workers dead, the first to die is read first whichever node's agent noticed first.
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
TIME_KEY = "faultlens_time"  # in the error file's extraInfo: when the exception ended the worker, in seconds
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
                now = time.time()
                # torch reads whole seconds; the agent orders deaths across nodes by the exact time.
                with open(path, "w") as fp:
                    json.dump({"message": {"message": f"{kind.__name__}: {value}", "extraInfo": {
                        "py_callstack": stack, "timestamp": str(int(now)), TIME_KEY: now}}}, fp)
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


def died_at(failure: Any, noticed: float, alive_at: float | None = None) -> float:
    """When the worker died, as well as the agent can tell: the time it recorded its exception (the
    hook's excepthook writes it to the second's fraction; ``@record``'s file in whole seconds), else
    (a signal, an exit with no word) ``alive_at``, the last time the agent saw its workers alive
    (it died after that, at most one --monitor-interval before the agent ``noticed``), else
    ``noticed``."""
    data = getattr(failure, "error_file_data", None)
    message = data.get("message") if isinstance(data, Mapping) else None
    if isinstance(message, Mapping):
        extra = message.get("extraInfo")
        exact = extra.get(TIME_KEY) if isinstance(extra, Mapping) else None
        if isinstance(exact, (int, float)) and not isinstance(exact, bool):
            return float(exact)
        if getattr(failure, "timestamp", 0):
            return float(failure.timestamp)
    return alive_at if alive_at is not None else noticed


def failure_events(job: str, node: str, failures: Mapping[int, Any], parser_factory: Callable[[], Any],
                   now: float | None = None, alive_at: float | None = None) -> list[Envelope]:
    """The parsed events of every failed worker (rank → torch's ProcessFailure), each stamped with
    when it died (:func:`died_at`; ``now``: when the agent noticed, ``alive_at``: when it last saw
    them alive), the first to die first. A worker that only lost its peer is never stamped before
    the first of this node's workers that failed on its own (diagnosis/rules/comms.py decides an
    incident on its first hard report): torch polls its workers every --monitor-interval and sees
    them all dead at once, and a peer's "connection reset" is recorded after the death it echoes.
    ``parser_factory``: a fresh line parser of the node agent's (parsing.registry.parser_for("nccl")),
    one per rank, since a traceback is joined across its lines."""
    noticed = time.time() if now is None else now
    stamped = {rank: died_at(failure, noticed, alive_at) for rank, failure in failures.items()}
    own = [stamped[rank] for rank, failure in failures.items() if not sympathetic(failure)]
    if own:
        first = min(own)
        stamped.update({rank: max(stamped[rank], first) for rank, f in failures.items() if sympathetic(f)})
    out: list[Envelope] = []
    order = sorted(failures.items(), key=lambda kv: (stamped[kv[0]], sympathetic(kv[1]), kv[0]))
    for rank, failure in order:
        parser = parser_factory()
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
            out.append(Envelope(ts=stamped[rank], job=job, node=node, source=p.source, kind=p.kind, data=p.data,
                                id=new_id()))
    return out
