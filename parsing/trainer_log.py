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
from typing import Any, Callable, Sequence

from faultlens.parsing import (
    fallback,
    group_timeout,
    job_context,
    nccl_lines,
    realign,
    signals,
    state_grammar,
    trainer_tracebacks,
)
from faultlens.parsing.alarm import QUICK as ALARM_QUICK
from faultlens.parsing.alarm import looks_alarming
from faultlens.parsing.benign import for_source as benign_for
from faultlens.parsing.caught import caught_exception
from faultlens.parsing.errors import (
    ExceptionLine,
    classify_bare,
    classify_cuda,
    classify_headless,
    classify_nccl,
    classify_terminate,
    nccl_fault,
)
from faultlens.parsing.kernel_quiet import record_only
from faultlens.parsing.level_subject import LETTER_FIRST, letter_frame
from faultlens.parsing.line import OnUnrecognised, ParsedLine, ParserStats, any_of, clean_line, common
from faultlens.parsing.nan_lines import nan_text, step_of
from faultlens.parsing.relayed_xid import relayed_xid
from faultlens.parsing.rules import LineRule, RuleSet
from faultlens.parsing.severity import NOTICE, WARNING, level_name, reassured, says_retrying, trainer_level
from faultlens.parsing.timestamps import split_timestamp
from faultlens.parsing.trainer_tracebacks import Traceback

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

# Lowered, one of these is on every line that can give an event or be called alarming when no
# traceback of its rank is open: the literals the single-line readings need to fire (the error
# texts of parsing.errors, the watchdog's, NCCL WARN, NaN; "inf" only as a word, TrainerLogParser
# adds that), a traceback's head, and with the rules' needles and parsing.alarm's words they make
# the pre-filter that settles the rest (most of a log: NCCL INFO, step lines) in one scan, clock
# unread. Not "nccl" or "cuda" alone: they are on every NCCL INFO line, and a CUDA or NCCL error
# text holds "error", "abort" or one of the phrases here. A test feeds every trainer line we hold
# with and without the pre-filter.
CODE_LITERALS = ("traceback (most recent call last):", "worknccl", "nccl work", "watchdog", "nccl warn", "warn: function: ", "_status_",
                 "out of memory", "illegal memory access", "launch failure",
                 # the other sticky device-side failures' texts, which hold no "error" (c10's "CUDA warning: misaligned address")
                 "illegal instruction was", "misaligned address", "hardware stack error", "invalid program counter",
                 "connection reset by", "connection closed by",
                 "broken pipe", "nan", "non-finite", "error", "exception", "got completion",
                 # NCCL's failing-call trace (file.cc:N -> rc, from any source file nccl_lines' _TRACE reads:
                 # .cc .cu .cpp .h), a checked CUDA call's return code, the CUDA runtime's not-ready text, the
                 # C++ runtime's abort, an errno report alone, NCCL's CUDACHECK unprefixed
                 ".cc:", ".cu:", ".cpp:", ".h:", " returned ", "not yet initialized", "terminate called", "[errno ", "cuda failure",
                 # ncclResult_t's names without "error" in them (ncclInvalidUsage, ncclInvalidArgument)
                 "ncclinvalid", "duplicate gpu detected", "xid",
                 # (round 46) ROCm's math libraries' status names (parsing/cuda_errors.py), some without "error" in them
                 "miopenstatus", "rocblas_status_",
                 # (round 18) NCCL's socket layer and bootstrap repeated unprefixed after torch's "Last error:"
                 "ncclsocket", "bootstrap : ")

# classify_nccl's names for the generic socket words any client prints, NCCL or not.
_SOCKET_WORDS = frozenset({"connection reset by peer", "connection closed by peer", "connection closed by remote peer", "broken pipe"})
# Classes of the errors whose detail lines follow them (a model line right after one is its detail).
_ERROR_CLASSES = ("cuda_error", "nccl_error", "gpu_memory", "user_code")


def _prefilter(rules: Sequence[LineRule]) -> re.Pattern[str] | None:
    """The pre-filter's regex (on the lowered body), or None when a rule has no needles."""
    if any(not r.needles for r in rules):
        return None
    words = {w.lower() for w in (*CODE_LITERALS, *signals.LITERALS, *ALARM_QUICK, *state_grammar.PREFILTER, *(n for r in rules for n in r.needles))}
    return re.compile(any_of(words).pattern + r"|inf(?:inity)?\b")  # nan_lines reads "inf" / "infinity" only ending a word: INFO's does not


def _soft(data: dict[str, Any]) -> bool:
    """A reading a line's own warning level takes back (fallback.model_line's guess, generic socket words)."""
    return data.get("basis") == "model" or data.get("error") in _SOCKET_WORDS


def _rank(text: str) -> int | None:
    m = _RANK.search(text)
    if not m:
        return None
    return int(next(g for g in m.groups() if g is not None))


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
        self._exit = job_context.CleanExit()  # (round 47) whether the job is exiting cleanly
        self._open: dict[tuple[str, int] | None, Traceback] = {}
        self._folded: dict[tuple[tuple[str, int] | None, str], tuple[int, float | None]] = {}
        self._t: float | None = None  # the current line's time (its own clock, else the caller's)
        # While a line is read again from a known format inside it (parsing.realign): the level its
        # cut-off prefix stated (None: none), which outranks the message's own.
        self._realigning = False
        self._prefix_level: int | None = None

    def feed(self, line: str, *, ts: float | None = None) -> list[ParsedLine]:
        """One raw line; ``ts`` is when it was read (the event's time), used when the line has no clock."""
        self.stats.lines += 1
        self._n += 1
        text = clean_line(line)
        if text is None:
            self.stats.garbled += 1
            return []
        label = _SRUN_LABEL.match(text) if text[:1].isdigit() else None
        body = job_context.host_label_off(text[label.end():] if label else text)  # (round 47) pdsh's "node-3: " too
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
        if (self._prefilter is not None and key not in self._open and not self._prefilter.search(lowered := body.lower())
                and not (lowered[:1] in LETTER_FIRST and letter_frame(lowered))):
            # No literal any reading needs and no word of trouble (its message is a suffix of the
            # body), no glog-style error letter opening it, and no traceback of its rank waits for it: nothing can come of it.
            self.stats.skipped += 1
            return []
        stamped = split_timestamp(body, now=self._now)
        self._t = stamped.ts if stamped.ts is not None else ts
        msg = stamped.message
        out: list[ParsedLine] = []
        absorbed = False
        # a reading again neither opens nor continues a traceback: its line was another rank's or none's
        tb = self._open.get(key) if not self._realigning else None
        if tb is not None:
            absorbed, closed = self._continue(tb, key, msg, text)
            out.extend(closed)
        if not absorbed:
            if trainer_tracebacks.starts(msg) and not self._realigning:
                self._open[key] = Traceback(prefix_rank, local_rank, stamped.ts, stamped.mono, [text])
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
        if not absorbed and not out and (reading := state_grammar.read_state(msg, text, self.source)) and self._benign.match(msg) is None:
            # Nothing took the line, but it says a device or node is in a bad state (issue 54)
            kind, data = state_grammar.grammar_event(reading, text, rank=prefix_rank if prefix_rank is not None else _rank(msg))
            out.append(ParsedLine(self.source, kind, data, stamped.ts, stamped.mono))
        if not absorbed and not out and not self._realigning and self._benign.match(msg) is None and (again := self._realigned(text, body, msg, ts)):
            return again
        if out and (level := self._prefix_level if self._prefix_level is not None else trainer_level(msg)) is not None and level >= NOTICE:
            # The line's own level first (issue 54): a line its logger printed at info, notice or
            # debug is recorded, never acted on, whatever its words (NCCL's INFO trace above too);
            # not a loss its progress line reports as NaN (a value read, at INFO like every step's),
            # nor a rule's message its program prints at that level (the rule's printk_level).
            told = [(e.kind, e.data) for e in out if e.kind != "nan" and level > self._printk_level(e.data.get("rule"))]
            record_only(told, f"the line's own level is {level_name(level)}")
        elif out:
            caught_exception(out, msg)
        self._exit.read(self._n, self._t, msg, out, self._realigning)  # (round 47) a clean exit's teardown
        self._mark(out, key, msg)
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

    def _mark(self, out: list[ParsedLine], key: Any, msg: str) -> None:
        """Remember the line's errors for the folds of the lines after it."""
        for event in out:
            # A line without a rank's prefix after a rank's error is most often that error's echo in
            # the C++ runtime's words (c10d's "Exception raised from checkTimeout at ...", "terminate
            # called after throwing an instance of 'c10::DistBackendError'", written to stderr unprefixed).
            if event.data.get("fault") in _ERROR_CLASSES:
                self._folded[(None, event.data["fault"])] = (self._n, self._t)
            if event.kind == "nccl_timeout":
                # (round 47) and under the rank its words name, whose dump lines fold into it (_seen_rule)
                for k in {key, job_context.named_rank_key(key, msg)}:
                    self._folded[(k, "nccl_timeout")] = (self._n, self._t)

    def _realigned(self, text: str, body: str, msg: str, ts: float | None) -> list[ParsedLine]:
        """A line that gave nothing, read again from where a format this parser knows begins inside
        its body (parsing.realign), behind its task label and rank prefix, at the level its cut-off
        prefix stated. The first reading that gives events is the line's; the line is counted once,
        and no traceback opens or continues on a reading."""
        lead = text[: len(text) - len(body)] if text.endswith(body) else ""

        def read(again: realign.Realigned) -> list[ParsedLine]:
            self._realigning, self._prefix_level, t = True, again.level, self._t
            try:
                out = self.feed(lead + again.line, ts=ts)
            finally:  # (round 47) the line's own clock stays its own (the reading's cut-off text has none)
                self._realigning, self._prefix_level, self._t = False, None, t
            self._n -= 1
            if out and again.level == WARNING and any(_soft(e.data) for e in out):
                return []  # at warning a guess or a client's socket words do not act (as on a line that says so itself)
            self._exit.kept(out)
            return out

        return realign.first_reading(realign.candidates(body, msg), self.stats, read)

    def flush(self) -> list[ParsedLine]:
        """Close every open traceback as truncated (its exception line never came)."""
        out = [e for key, tb in self._open.items() for e in self._emit(key, tb, None, None, truncated=True)]
        self._open.clear()
        self._folded.clear()
        self.stats.events += len(out)
        return out

    # -- tracebacks -------------------------------------------------------------------------
    def _continue(self, tb: Traceback, key: Any, msg: str, raw: str) -> tuple[bool, list[ParsedLine]]:
        """Feed one line to an open traceback: (absorbed, events closed by it)."""
        st = trainer_tracebacks.step(tb, msg, raw)
        if not st.closed:
            return st.absorbed, []
        del self._open[key]
        return st.absorbed, self._emit(key, tb, st.etype, st.message, truncated=st.truncated)

    def _emit(self, key: Any, tb: Traceback, etype: str | None, message: str | None, truncated: bool = False) -> list[ParsedLine]:
        """The exception event; for one that ends in a CUDA / NCCL error also that error's own event
        (detectors of CUDA and NCCL faults read those kinds), unless the error was just reported."""
        data = trainer_tracebacks.judge_traceback(tb, etype, message, truncated)
        fault = data["fault"]
        companion = None
        if fault in ("cuda_error", "nccl_error", "gpu_memory") and "error" in data:
            kind = "nccl_error" if fault == "nccl_error" else "cuda_error"
            if not self._fold(key, fault):
                companion = ParsedLine(self.source, kind, common(tb.last, fault, data["action"], data["severity"],
                                                                 rank=tb.rank, error=data["error"]), tb.ts, tb.mono)  # fmt: skip
                if tb.local_rank is not None:
                    companion.data["local_rank"] = tb.local_rank
            self._folded[(key, fault)] = (self._n, self._t)
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
        found = self._rules.match(msg, raw, lambda k: self._seen_rule(key, k, msg))
        if found is not None:
            for _, data in found:
                data.setdefault("rank", rank)
                data.update(extra)
            return found
        low = msg.lower()
        if "WorkNCCL" in msg or "NCCL work" in msg or "watchdog" in low:
            found = nccl_lines.watchdog(msg, raw, rank, extra)
            if found is not None:
                return found
        # a barrier or collective among tasks that timed out (JAX, TF, UCC): its regexes only where a word of lateness is
        if "timed" in low or "deadline" in low or "expired" in low:
            late = group_timeout.group_timeout(msg, raw, rank, extra)
            if late is not None:
                return [late]
        if "NCCL WARN" in msg or "WARN: Function: " in msg or "Cuda failure " in msg:
            m = nccl_lines.NCCL_WARN.search(msg) or nccl_lines.PLUGIN_OWN_WARN.search(msg) or nccl_lines.BARE_CUDACHECK.match(msg)
            if m:
                return [nccl_lines.nccl_warn(m, raw, rank, extra)]
        if "Got completion" in msg:
            ib = nccl_lines.ib_completion(msg, raw, rank, extra)
            if ib is not None:
                return [ib]
        if ("CUDA" in msg or "cuda" in msg or "_STATUS_" in msg or "ECC" in msg or "launch failure" in msg or "illegal memory" in msg
                or "not yet initialized" in msg or "Cuda failure" in msg or " out of memory" in msg or "HIP error" in msg or "hipError" in msg
                or "_RESULT_ERROR_" in msg or "ynchronize stream failed" in msg or "ACL stream" in msg or "Kernel task happen" in msg
                or "THCudaCheck" in msg or "cudaSuccess" in msg or "HIP_ERROR" in msg or "Assertion" in msg
                or "OfDeviceMemory" in msg or "OF_DEVICE_MEMORY" in msg or "() failed" in msg or "no kernel image" in msg
                or "invalid device function" in msg or "miopenStatus" in msg or "rocblas_status_" in msg
                or "cuDNN" in msg or "NVIDIA driver" in msg or "find an engine" in msg):
            cuda = classify_cuda(msg)
            if cuda:
                error, fault, action, severity = cuda
                if self._fold(key, fault):
                    return []
                self._folded[(key, fault)] = (self._n, self._t)
                return [("cuda_error", common(raw, fault, action, severity, rank=rank, error=error, **extra))]
        if ("ncc" in msg or "NCCL" in msg or "onnection" in msg or "Broken pipe" in msg or "Duplicate GPU" in msg or "Bootstrap :" in msg
                or "gloo" in msg or "Gloo" in msg):
            nccl = classify_nccl(msg)
            if nccl in _SOCKET_WORDS and (says_retrying(msg) or trainer_level(msg) == WARNING):
                # Generic socket words, not NCCL's, in a line its program printed at warning or that
                # says it retries (wandb's "[WARNING] ... retryable exception: ... Connection reset by
                # peer"): a client's own retry, not a collective's failure (issue 54, round 15).
                nccl = None
            if nccl:
                if self._fold(key, "nccl_error", CXX_FOLD_LINES if msg.startswith("Exception raised from") else FOLD_LINES):
                    return []
                self._folded[(key, "nccl_error")] = (self._n, self._t)
                return [("nccl_error", common(raw, *nccl_fault(nccl), "error", rank=rank, error=nccl, **extra))]
        if "Xid" in msg or "XID" in msg:
            found = relayed_xid(msg, raw, rank, extra)
            if found is not None:
                return found
        if nan_text(msg):
            return [("nan", common(raw, "nan_loss", "stop_time_diagnosis", "error", rank=rank, text=msg.strip()[:512],
                                   step=step_of(msg), **extra))]  # fmt: skip
        if ((":" in msg and ("Error" in msg or "Exception" in msg)) or "[Errno " in msg or "[enforce fail at " in msg
                or msg.endswith(("Error", "Exception")) or "failed with e" in msg or " error: " in msg or "EnforceNotMet: " in msg):
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

    def _seen_rule(self, key: Any, fold: Any, msg: str = "") -> bool:
        if fold[0] == "nccl_error":
            # A rule folding as NCCL's error (ProcessGroupNCCL's own E lines): what the process group
            # prints after a watchdog timeout or an NCCL error of the rank (the failed collective's
            # stack, the flight recorder's dump, the heartbeat) is that error's echo, over its C++ dump
            # and however long the dump took (by lines, not seconds: it waits on the flight recorder).
            # (round 47) A line whose rank prefix is not at its start (a launcher's host label before it: pdsh's
            # "localhost: [rank2]:[E328 ...") still names its rank in ProcessGroupNCCL's own words ("[PG ID 0 PG GUID 0
            # Rank 2]"): the fold is that rank's, not every unprefixed line's (another rank's dump is its own news).
            key = job_context.named_rank_key(key, msg)
            seen = any((at := self._folded.get((key, f))) is not None and self._n - at[0] <= CXX_FOLD_LINES
                       for f in ("nccl_error", "nccl_timeout"))
            self._folded[(key, "nccl_error")] = (self._n, self._t)
            return seen
        seen = self._fold(key, fold)
        self._folded[(key, fold)] = (self._n, self._t)
        return seen
