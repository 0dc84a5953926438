"""(round 46) The program's own exception that it caught and went on past: recorded, not acted on."""

from __future__ import annotations

from faultlens.parsing.kernel_quiet import record_only
from faultlens.parsing.line import ParsedLine
from faultlens.parsing.severity import reassured, warned_exception

# The classes of a program's own exception (the exception table's and the compiler's): caught and logged at warning, or
# handled by another way the line names, it is recorded (round 46).
_OWN_EXCEPTION = ("user_code", "unknown")


def caught_exception(out: list[ParsedLine], msg: str) -> None:
    """(round 46) The program's own exception (user_code or unknown) that it caught and went on past is recorded, not acted
    on: a logging record at WARNING whose message is the exception (dynamo's suppressed BackendCompilerFailed, vLLM's
    optional import), or an exception's line that says what the program does instead ("... raised RuntimeError: ... NeMo
    will fallback to loading via pydub"). A disk's, a device's or a collective's error keeps acting."""
    own = [(e.kind, e.data) for e in out if e.kind == "exception" and e.data.get("fault") in _OWN_EXCEPTION]
    if not own:
        return
    why = ("the line's own level is warning and its message an exception the program caught" if warned_exception(msg)
           else "the line says what the program does instead of the exception" if reassured(msg) else None)
    if why is not None:
        record_only(own, why)
