"""Trainer / NCCL log (stdout+stderr of torchrun ranks) -> parsed events (docs/events.md, source ``nccl``).

Single-line records (NCCL WARN, ProcessGroupNCCL watchdog, CUDA and NCCL errors, NaN losses)
are emitted on their line. Python tracebacks span lines, and with torchrun's ``[rank3]:`` prefix
the tracebacks of many ranks interleave, so one traceback is kept open per rank prefix until its
exception line arrives (or :meth:`TrainerLogParser.flush` closes it as truncated).

The rank comes from ``[rank3]:``, ``[Rank 3]``, ``... Rank 3]`` or ``rank=3``; the ``[3]`` of an
NCCL line is the CUDA device, kept as ``device``, never taken for the rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from faultlens.parsing import fallback, nccl_lines, signals
from faultlens.parsing.alarm import QUICK as ALARM_QUICK
from faultlens.parsing.alarm import looks_alarming
from faultlens.parsing.benign import for_source as benign_for
from faultlens.parsing.errors import (
    USER_TYPES,
    ExceptionLine,
    classify_bare,
    classify_cuda,
    classify_headless,
    classify_nccl,
    classify_terminate,
)
from faultlens.parsing.exceptions import judge
from faultlens.parsing.kernel_quiet import record_only
from faultlens.parsing.line import MAX_KEPT, OnUnrecognised, ParsedLine, ParserStats, any_of, clean_line, common
from faultlens.parsing.rules import LineRule, RuleSet
from faultlens.parsing.severity import NOTICE, WARNING, level_name, reassured, trainer_level
from faultlens.parsing.timestamps import split_timestamp

# A traceback that sees this many foreign lines before its exception line is given up as truncated.
TRACEBACK_PATIENCE = 32
MAX_FRAMES = 256
# Lines after a traceback that repeat its error (torch prints the NCCL/CUDA detail again) fold into it,
# when they also come within FOLD_S seconds: the same error hours later (after a restart) is news.
FOLD_LINES = 8
# A C++ exception's echoes (c10's "Exception raised from X at ...", std::terminate's line) come after
# the stack c10 prints under each ("frame #0: ..." lines, up to ~60 for torch's watchdog).
CXX_FOLD_LINES = 64
FOLD_S = 10.0

# srun --label / Slurm's "N: " task prefix before everything else (the task id, not always the rank).
_SRUN_LABEL = re.compile(r"^\d{1,6}: ")
_PREFIX = re.compile(r"^\[(?:(rank)(\d+)|(default)(\d+))\]:\s?")
# Ray's prefix on every line a worker actor prints ("(RayWorkerWrapper pid=92234, ip=172.19.24.110) ",
# ray python/ray/_private/log_monitor.py) and its de-duplication's suffix (" [repeated 2x across
# cluster]", ray _private/ray_logging: the same line from other workers): the worker's own line is between.
_RAY = re.compile(r"^\([\w.\-]+ pid=\d+(?:, ip=[\w.:\-]+)?\) ")
_RAY_REPEATED = re.compile(r" \[repeated \d+x across cluster\]$")
_RANK = re.compile(r"\[Rank (\d+)\]|\bRank (\d+)\]|\brank[=:]\s?(\d+)\b|\bglobal rank (\d+)\b")

_NAN = re.compile(
    # Lightning: "The loss returned in `training_step` is tensor(nan, ...)" (a longer gap, a tensor repr)
    # a loss by any name ("loss", "loss_box_reg_stage0", "val_loss"), as a dict of a detector's losses prints it
    # a signed NaN too (Caffe's and darknet's C printf: "loss = -nan"), and Keras's bar glued to the
    # next epoch's header when the bar's line was not ended ("loss: nanEpoch 1/1000")
    r"\b(?:\w*loss\w*|grad(?:ient)?[_ ]norm)\b[^\n]{0,40}?(?:\bis\b|=|:)\s*(?:tensor\()?[+-]?(?:nan|inf)(?:\b|(?=Epoch \d))"
    r"|\b(?:detected|found|encountered)\b[^\n]{0,24}?\b(?:nan|inf)\b"
    # tensorboard's "NaN or Inf found in input tensor." (the logged loss went non-finite)
    r"|\b(?:nan|inf)\b(?: or (?:nan|inf)\b)? (?:found|detected|encountered)\b"
    r"|\b(?:nan|inf)\s+(?:in\s+(?:\w+\s+)?)?(?:loss|grad(?:ient)?[_ ]norm)\b"
    # clip_grad_norm_'s "Non-finite norm encountered" / "The total norm of order 2.0 ... is non-finite"
    # MXNet's Speedometer and gluon-cv's batch lines name each metric ("[Epoch 0][Batch 1], ... SmoothL1=nan"):
    # after a batch every metric averages real samples, so a NaN one is the training's numbers
    r"|\bepoch\W{0,2}\d+\W{1,3}batch\W{0,2}\d+\b[^\n]*?\b\w+=[+-]?nan\b"
    r"|\bnan (?:loss|detected)\b|non-finite (?:loss|value|(?:total |gradient |grad )?norm)\b|\btotal norm of order [\d.]+ .{0,60}\bis non-finite",
    re.IGNORECASE,
)
# nanoGPT and similar loops print "iter 110: loss nan, time ..." (no separator before the value).
# A loss by any name, bare too ("discrim_loss nan"); a loss tensor printed bare: "loss tensor(nan, device='cuda:0', ...)".
_NAN_BARE = re.compile(r"\b(?:\w*loss|grad(?:ient)?[_ ]norm)\s+(?:tensor\()?(?:nan|[+-]?inf)\b", re.IGNORECASE)
_NAN_CONTEXT = re.compile(r"loss|norm|detect|found|encounter|finite|batch")
# Every _NAN / _NAN_BARE match holds "nan", or "inf" ending a word: the "inf" of every "INFO" does not.
_NAN_OR_INF = re.compile(r"nan|inf\b")
_STEP = re.compile(r"\b(?:step|iter(?:ation)?)\b\D{0,3}(\d+)", re.IGNORECASE)

_TB_START = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<lineno>\d+)(?:, in (?P<func>.+))?')
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
_EXC_SUFFIXES = ("Error", "Exception", "Interrupt", "Exit", "Failure", "Warning", "Timeout", "StopIteration")
_LIBRARY = re.compile(r"site-packages|dist-packages|/torch/|/lib/python\d(?:\.\d+)?/|\\lib\\|^<frozen|^<")


# Lowered, one of these is on every line that can give an event or be called alarming when no
# traceback of its rank is open: the literals the single-line readings need to fire (the error
# texts of parsing.errors, the watchdog's, NCCL WARN, NaN; "inf" only as a word, TrainerLogParser
# adds that), a traceback's head, and with the rules' needles and parsing.alarm's words they make
# the pre-filter that settles the rest (most of a log: NCCL INFO, step lines) in one scan, clock
# unread. Not "nccl" or "cuda" alone: they are on every NCCL INFO line, and a CUDA or NCCL error
# text holds "error", "abort" or one of the phrases here. A test feeds every trainer line we hold
# with and without the pre-filter.
CODE_LITERALS = ("traceback (most recent call last):", "worknccl", "nccl work", "watchdog", "nccl warn", "_status_",
                 "out of memory", "illegal memory access", "launch failure", "connection reset by", "connection closed by",
                 "broken pipe", "nan", "non-finite", "error", "exception", "got completion",
                 # NCCL's failing-call trace (file.cc:N -> rc, from any source file nccl_lines' _TRACE reads:
                 # .cc .cu .cpp .h), a checked CUDA call's return code, the CUDA runtime's not-ready text, the
                 # C++ runtime's abort, an errno report alone, NCCL's CUDACHECK unprefixed
                 ".cc:", ".cu:", ".cpp:", ".h:", " returned ", "not yet initialized", "terminate called", "[errno ", "cuda failure")

# Classes of the errors whose detail lines follow them (a model line right after one is its detail).
_ERROR_CLASSES = ("cuda_error", "nccl_error", "gpu_memory", "user_code")


def _prefilter(rules: Sequence[LineRule]) -> re.Pattern[str] | None:
    """The pre-filter's regex (on the lowered body), or None when a rule has no needles."""
    if any(not r.needles for r in rules):
        return None
    words = {w.lower() for w in (*CODE_LITERALS, *signals.LITERALS, *ALARM_QUICK, *(n for r in rules for n in r.needles))}
    return re.compile(any_of(words).pattern + r"|inf\b")  # _NAN_OR_INF's "inf" ends a word: INFO's does not


def _rank(text: str) -> int | None:
    m = _RANK.search(text)
    if not m:
        return None
    return int(next(g for g in m.groups() if g is not None))


@dataclass
class _Traceback:
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


class TrainerLogParser:
    source = "nccl"

    def __init__(self, *, now: float | None = None, rules: Sequence[LineRule] | None = None,
                 on_unrecognised: OnUnrecognised | None = None):
        self.stats = ParserStats()
        self.on_unrecognised = on_unrecognised
        self._now = now
        self._rules = RuleSet.for_source(self.source, rules)
        self._rule_by_id = {r.id: r for r in self._rules.rules}
        self._benign = benign_for(self.source)
        self._prefilter = _prefilter(self._rules.rules)
        self._n = 0
        self._open: dict[tuple[str, int] | None, _Traceback] = {}
        self._folded: dict[tuple[tuple[str, int] | None, str], tuple[int, float | None]] = {}
        self._t: float | None = None  # the current line's time (its own clock, else the caller's)

    def feed(self, line: str, *, ts: float | None = None) -> list[ParsedLine]:
        """One raw line; ``ts`` is when it was read (the event's time), used when the line has no clock."""
        self.stats.lines += 1
        self._n += 1
        text = clean_line(line)
        if text is None:
            self.stats.garbled += 1
            return []
        label = _SRUN_LABEL.match(text) if text[:1].isdigit() else None
        body = text[label.end():] if label else text
        if body[:1] == "(" and (ray := _RAY.match(body)) is not None:
            body = body[ray.end():]
            if body.endswith("cluster]"):
                body = _RAY_REPEATED.sub("", body)
        m = _PREFIX.match(body)
        key: tuple[str, int] | None = None
        prefix_rank = local_rank = None
        if m:
            if m.group(1):
                prefix_rank = int(m.group(2))
                key = ("rank", prefix_rank)
            else:
                local_rank = int(m.group(4))
                key = ("local", local_rank)
            body = body[m.end():]
        if self._prefilter is not None and key not in self._open and not self._prefilter.search(body.lower()):
            # No literal any reading needs and no word of trouble (its message is a suffix of the
            # body), and no traceback of its rank waits for it: nothing can come of it.
            self.stats.skipped += 1
            return []
        stamped = split_timestamp(body, now=self._now)
        self._t = stamped.ts if stamped.ts is not None else ts
        msg = stamped.message
        out: list[ParsedLine] = []
        absorbed = False
        tb = self._open.get(key)
        if tb is not None:
            absorbed, closed = self._continue(tb, key, msg, text)
            out.extend(closed)
        if not absorbed:
            if msg.startswith(_TB_START) or (_TB_START in msg and msg.strip() == _TB_START):
                self._open[key] = _Traceback(prefix_rank, local_rank, stamped.ts, stamped.mono, [text])
                absorbed = True
            else:
                found = self._single(msg, text, prefix_rank, local_rank, key)
                if found is not None:
                    absorbed = True
                    if prefix_rank is None and found:  # only now: the rank search is the costliest regex
                        rank = _rank(msg)
                        for _, data in found:
                            if data.get("rank") is None:
                                data["rank"] = rank
                    out.extend(ParsedLine(self.source, kind, data, stamped.ts, stamped.mono) for kind, data in found)
        alarming = not absorbed and not out and looks_alarming(msg)
        # A line that says its trouble was corrected or recovered is no alert on its own: the
        # model is not asked (it is still counted below as an alarming line nobody took).
        if alarming and self._benign.match(msg) is None and not reassured(msg):
            guessed = fallback.model_line(msg, text, self.source, rank=prefix_rank if prefix_rank is not None else _rank(msg))
            if guessed and any(self._fold(key, f) for f in (guessed[0][1]["fault"], *_ERROR_CLASSES)):
                absorbed = True  # the detail of an error of that class just reported (NCCL's "Last error:" lines)
            elif guessed:
                self.stats.by_model += 1
                self._folded[(key, guessed[0][1]["fault"])] = (self._n, self._t)
                out.extend(ParsedLine(self.source, kind, data, stamped.ts, stamped.mono) for kind, data in guessed)
        if out and (level := trainer_level(msg)) is not None and level >= NOTICE:
            # The line's own level first (issue 54): a line its logger printed at info, notice or
            # debug is recorded, never acted on, whatever its words (NCCL's INFO trace above too);
            # not a loss its progress line reports as NaN (a value read, at INFO like every step's),
            # nor a rule's message its program prints at that level (the rule's printk_level).
            told = [(e.kind, e.data) for e in out if e.kind != "nan" and level > self._printk_level(e.data.get("rule"))]
            record_only(told, f"the line's own level is {level_name(level)}")
        for event in out:
            # A line without a rank's prefix after a rank's error is most often that error's echo in
            # the C++ runtime's words (c10d's "Exception raised from checkTimeout at ...", "terminate
            # called after throwing an instance of 'c10::DistBackendError'", written to stderr unprefixed).
            if event.data.get("fault") in _ERROR_CLASSES:
                self._folded[(None, event.data["fault"])] = (self._n, self._t)
            if event.kind == "nccl_timeout":
                self._folded[(key, "nccl_timeout")] = (self._n, self._t)
        if absorbed or out:
            self.stats.recognised += 1
        else:
            self.stats.skipped += 1
            if alarming:
                self.stats.alarming += 1
                if self.on_unrecognised is not None:
                    self.on_unrecognised(msg)
        self.stats.events += len(out)
        return out

    def flush(self) -> list[ParsedLine]:
        """Close every open traceback as truncated (its exception line never came)."""
        out = [e for key, tb in self._open.items() for e in self._emit(key, tb, None, None, truncated=True)]
        self._open.clear()
        self._folded.clear()
        self.stats.events += len(out)
        return out

    # -- tracebacks -------------------------------------------------------------------------
    def _continue(self, tb: _Traceback, key: Any, msg: str, raw: str) -> tuple[bool, list[ParsedLine]]:
        """Feed one line to an open traceback: (absorbed, events closed by it)."""
        fm = _FRAME.match(msg)
        if fm:
            tb.add(raw)
            if len(tb.frames) >= MAX_FRAMES:
                tb.frames.pop(0)
            tb.frames.append((fm.group("file"), int(fm.group("lineno")), (fm.group("func") or "").strip()))
            tb.idle = 0
            return True, []
        if not msg.strip() or msg[0] in " \t":
            tb.add(raw)  # source lines, ^^^^ markers, "[Previous line repeated N more times]"
            return True, []
        em = _EXC.match(msg.strip())
        if em and tb.frames and em.group("type").rsplit(".", 1)[-1].endswith(_EXC_SUFFIXES):
            tb.add(raw)
            del self._open[key]
            return True, self._emit(key, tb, em.group("type"), (em.group("msg") or "").strip())
        if msg.startswith(_TB_START):
            del self._open[key]
            return False, self._emit(key, tb, None, None, truncated=True)
        tb.idle += 1
        if tb.idle > TRACEBACK_PATIENCE:
            del self._open[key]
            return False, self._emit(key, tb, None, None, truncated=True)
        return False, []

    def _emit(self, key: Any, tb: _Traceback, etype: str | None, message: str | None, truncated: bool = False) -> list[ParsedLine]:
        """The exception event; for one that ends in a CUDA / NCCL error also that error's own event
        (detectors of CUDA and NCCL faults read those kinds), unless the error was just reported."""
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
            fault, action, severity = "nccl_error", "reattempt", "error"
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
        companion = None
        if fault in ("cuda_error", "nccl_error", "gpu_memory") and "error" in extra:
            kind = "nccl_error" if fault == "nccl_error" else "cuda_error"
            if not self._fold(key, fault):
                companion = ParsedLine(self.source, kind, common(tb.last, fault, action, severity,
                                                                 rank=tb.rank, error=extra["error"]), tb.ts, tb.mono)  # fmt: skip
            self._folded[(key, fault)] = (self._n, self._t)
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
        if companion is not None and tb.local_rank is not None:
            companion.data["local_rank"] = tb.local_rank
        exception = ParsedLine(self.source, "exception", data, tb.ts, tb.mono)
        return [exception, companion] if companion is not None else [exception]

    # -- single lines ----------------------------------------------------------------------
    def _fold(self, key: Any, fault: str, lines: int = FOLD_LINES) -> bool:
        """The same error on the same rank a few lines AND a few seconds ago: the echo of one report."""
        at = self._folded.get((key, fault))
        if at is None or self._n - at[0] > lines:
            return False
        return at[1] is None or self._t is None or abs(self._t - at[1]) <= FOLD_S

    def _single(self, msg: str, raw: str, rank: int | None, local_rank: int | None, key: Any) -> list[tuple[str, dict[str, Any]]] | None:
        extra: dict[str, Any] = {"local_rank": local_rank} if local_rank is not None else {}
        if "NCCL INFO " in msg:
            # NCCL's INFO chatter (even "Connection closed" at shutdown) is never a fault, but for the
            # trace NCCL prints at INFO of a call that failed ("bootstrap.cc:701 -> 6"): recorded, its
            # action taken off in feed() as every INFO line's (NCCL's WARN names the failure).
            # The tag anywhere: a line that starts with it ("NCCL INFO ...", no host prefix) once went
            # on to the catalogue and the error words below and acted.
            failed = nccl_lines.failing_call(msg) if " -> " in msg else None
            if failed is None:
                return None
            if self._fold(key, "nccl_error"):
                return []
            self._folded[(key, "nccl_error")] = (self._n, self._t)
            return [("nccl_error", common(raw, "nccl_error", "reattempt", "error", rank=rank, error=failed, **extra))]
        # The catalogue first: its trainer rules name lines the generic NCCL WARN / error reading
        # below would take for an NCCL fault (an IB port error is the NIC's).
        found = self._rules.match(msg, raw, lambda k: self._seen_rule(key, k))
        if found is not None:
            for _, data in found:
                data.setdefault("rank", rank)
                data.update(extra)
            return found
        if "WorkNCCL" in msg or "NCCL work" in msg or "watchdog" in msg.lower():
            found = nccl_lines.watchdog(msg, raw, rank, extra)
            if found is not None:
                return found
        if "NCCL WARN" in msg:
            m = nccl_lines.NCCL_WARN.search(msg)
            if m:
                return [nccl_lines.nccl_warn(m, raw, rank, extra)]
        if "Got completion" in msg:
            ib = nccl_lines.ib_completion(msg, raw, rank, extra)
            if ib is not None:
                return [ib]
        if ("CUDA" in msg or "cuda" in msg or "_STATUS_" in msg or "ECC" in msg or "launch failure" in msg or "illegal memory" in msg
                or "not yet initialized" in msg or "Cuda failure" in msg or " out of memory" in msg or "HIP error" in msg or "hipError" in msg):
            cuda = classify_cuda(msg)
            if cuda:
                error, fault, action, severity = cuda
                if self._fold(key, fault):
                    return []
                self._folded[(key, fault)] = (self._n, self._t)
                return [("cuda_error", common(raw, fault, action, severity, rank=rank, error=error, **extra))]
        if "ncc" in msg or "NCCL" in msg or "onnection" in msg or "Broken pipe" in msg:
            nccl = classify_nccl(msg)
            if nccl:
                if self._fold(key, "nccl_error", CXX_FOLD_LINES if msg.startswith("Exception raised from") else FOLD_LINES):
                    return []
                self._folded[(key, "nccl_error")] = (self._n, self._t)
                return [("nccl_error", common(raw, "nccl_error", "reattempt", "error", rank=rank, error=nccl, **extra))]
        low = msg.lower()
        if ("nan" in low or "non-finite" in low or "inf" in low and _NAN_OR_INF.search(low)) and _NAN_CONTEXT.search(low) and "overflow" not in low and (_NAN.search(msg) or _NAN_BARE.search(msg)):
            sm = _STEP.search(msg)
            return [("nan", common(raw, "nan_loss", "stop_time_diagnosis", "error", rank=rank, text=msg.strip()[:512],
                                   step=int(sm.group(1)) if sm else None, **extra))]  # fmt: skip
        if (":" in msg and ("Error" in msg or "Exception" in msg)) or "[Errno " in msg or msg.endswith(("Error", "Exception")):
            found = self._headless(msg, raw, rank, key, extra)
            if found is not None:
                return found
        if "terminate called" in msg:
            found = self._headless(msg, raw, rank, key, extra, classify_terminate)
            if found is not None:
                return found
        # A process that died of a signal, in a shell's, an IDE's, torchrun's or Slurm's words
        # (an exception that reports one was judged above, the signal included: parsing.errors).
        found = signals.read_signal(msg, raw)
        if found is not None:
            for _, data in found:
                data["rank"] = rank
                data.update(extra)
        return found

    def _headless(self, msg: str, raw: str, rank: int | None, key: Any, extra: dict[str, Any],
                  classify: Callable[[str], ExceptionLine | None] | None = None) -> list[tuple[str, dict[str, Any]]] | None:
        """The exception line of a traceback whose header and frames went elsewhere (ranks
        interleave their output; a log collector kept only the last line), an errno report or a
        bare type alone, or ``classify``'s reading (a C++ exception's abort): parsing.errors judges it."""
        found = classify(msg) if classify is not None else classify_headless(msg) or classify_bare(msg)
        if found is None:
            return None
        if self._fold(key, found.fault, FOLD_LINES if classify is None else CXX_FOLD_LINES):
            return []  # the echo of the traceback just closed
        self._folded[(key, found.fault)] = (self._n, self._t)
        data = common(raw, found.fault, found.action, found.severity, rank=rank, type=found.type, message=found.message[:1024],
                      file=None, lineno=None, func=None, user_code=found.fault == "user_code", frames=0, headless=True, **extra)  # fmt: skip
        if found.error:
            data["error"] = found.error
        return [("exception", data)]

    def _printk_level(self, rule_id: str | None) -> int:
        """The level the rule that read a line says its message is printed at (warning: none)."""
        rule = self._rule_by_id.get(rule_id) if rule_id else None
        return rule.printk_level if rule is not None else WARNING

    def _seen_rule(self, key: Any, fold: Any) -> bool:
        if fold[0] == "nccl_error":
            # A rule folding as NCCL's error (ProcessGroupNCCL's own E lines): what the process group
            # prints after a watchdog timeout or an NCCL error of the rank (the failed collective's
            # stack, the flight recorder's dump, the heartbeat) is that error's echo, over its C++ dump
            # and however long the dump took (by lines, not seconds: it waits on the flight recorder).
            seen = any((at := self._folded.get((key, f))) is not None and self._n - at[0] <= CXX_FOLD_LINES
                       for f in ("nccl_error", "nccl_timeout"))
            self._folded[(key, "nccl_error")] = (self._n, self._t)
            return seen
        seen = self._fold(key, fold)
        self._folded[(key, fold)] = (self._n, self._t)
        return seen
