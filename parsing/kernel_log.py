"""Kernel log (dmesg, /dev/kmsg, syslog, journald) -> parsed events (docs/events.md, source ``kernel``).

One parser per node's kernel stream: it settles most lines with one scan (the pre-filter), reads
the clock of the rest, drops known-benign lines, and dispatches each line on its literals to the
family that reads it: the NVIDIA driver's (parsing.kernel_gpu: Xids, a GPU off the bus, SXids),
the host's (parsing.kernel_host: segfaults, OOM, stalls, AER, machine checks), the NICs'
(parsing.kernel_nic), then the rule catalogue (parsing.rules) and, for a line nobody took, its
subsystem or the line model (parsing.fallback), else what it says of a device's state
(parsing.state_grammar). The echoes of one fault over several lines fold into the event of its
first line (parsing.kernel_echoes), which is emitted at once: a lost GPU should not wait for the
next line.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from faultlens.parsing import fallback, kernel_host, kernel_quiet, realign, state_grammar
from faultlens.parsing.alarm import ALARM_PRIORITY, kernel_priority
from faultlens.parsing.alarm import QUICK as ALARM_QUICK
from faultlens.parsing.benign import for_source as benign_for
from faultlens.parsing.kernel_echoes import Echoes
from faultlens.parsing.kernel_gpu import NVRM_LITERALS, GpuLines
from faultlens.parsing.kernel_nic import LITERALS as NIC_LITERALS
from faultlens.parsing.kernel_nic import netdev_watchdog_events, nic_events
from faultlens.parsing.line import OnUnrecognised, ParsedLine, ParserStats, any_of, clean_line
from faultlens.parsing.rules import LineRule, RuleSet, gate_words
from faultlens.parsing.severity import QUICK as SEVERITY_QUICK
from faultlens.parsing.severity import Severity, level_word, severity_of
from faultlens.parsing.subsystems import subsystem_of
from faultlens.parsing.timestamps import split_timestamp

# Every literal _code below dispatches on, lowered: with the rules' and the benign table's needles
# and the error and alarm words, a line holding none of them (most of a real log) is settled by one
# scan (KernelLogParser.feed). Keep in step with _code: a test checks each of its literals is here,
# or is a branch in NARROWED.
CODE_LITERALS = ("kernel panic", "fallen off the bus", "sxid", "segfault at", "traps: ", "out of memory",
                 "oom-kill:", "oom kill:", "oom_reaper", "killed process", "lockup", "blocked for more than", "rcu: info", "aer",
                 "pcie bus error", "edac", "mce:", "[hardware error]: ", "netdev watchdog", "rc all channels")
# Branches of _code whose handler reads a line only when it holds one of its own, narrower
# literals: the pre-filter holds those instead of the branch's word (the driver prints "NVRM" on
# every line, "link" and "port" fill a healthy log).
NARROWED = {"nvrm": NVRM_LITERALS, "mlx": NIC_LITERALS, "link": NIC_LITERALS, "port": NIC_LITERALS, "carrier o": NIC_LITERALS}


def _own_level(msg: str, raw: str) -> int | None:
    """The level the line states: its kmsg / printk priority, else its level word (severity.level_word)."""
    prio = kernel_priority(raw)
    return prio if prio is not None else level_word(msg)


def _prefilter(rules: Sequence[LineRule], benign_needles: Sequence[str]) -> re.Pattern[str] | None:
    """One trie regex (on the lowered message) that every line some part of the parser could take
    matches; None when a rule has no needles (then no line can be ruled out). A rule brings its
    needles, or words its pattern needs that pass fewer lines (parsing.rules.gate_words: not
    the NARROWED words, on every line of their driver)."""
    if any(not r.needles for r in rules):
        return None
    words = {w.lower() for w in (*CODE_LITERALS, *NVRM_LITERALS, *NIC_LITERALS, *SEVERITY_QUICK, *ALARM_QUICK, *state_grammar.PREFILTER, *benign_needles)}
    return any_of(words | gate_words(rules, words, NARROWED))


class KernelLogParser:
    source = "kernel"

    def __init__(self, *, now: float | None = None, rules: Sequence[LineRule] | None = None,
                 on_unrecognised: OnUnrecognised | None = None, live_from: float | None = None):
        """``live_from``: the kernel uptime (seconds) from which a line may act against a job; the
        lines before it were logged at boot or before the agent started (parsing.kernel_quiet).
        The agent passes its own start where it knows it; a file parse gets BOOT_UPTIME_S."""
        self.stats = ParserStats()
        self._live_from = kernel_quiet.BOOT_UPTIME_S if live_from is None else live_from
        self.on_unrecognised = on_unrecognised
        self._now = now
        self._rules = RuleSet.for_source(self.source, rules)
        self._rule_by_id = {r.id: r for r in self._rules.rules}
        self._benign = benign_for(self.source)
        self._prefilter = _prefilter(self._rules.rules, self._benign.needles)
        # The fold memory; its n is the line number, its clock this line's time (boot clock, wall
        # clock or the caller's).
        self._echoes = Echoes()
        self._gpu = GpuLines(self._echoes)
        self._realigning = False  # reading a line again from a known format inside it (parsing.realign)

    def feed(self, line: str, *, ts: float | None = None) -> list[ParsedLine]:
        """One raw line; ``ts`` is when it was read (the event's time), used when the line has no clock."""
        self.stats.lines += 1
        echoes = self._echoes
        echoes.n += 1
        text = clean_line(line)
        if text is None:
            self.stats.garbled += 1
            return []
        if self._prefilter is not None and not self._prefilter.search(text.lower()):
            # No code literal, needle, benign needle or error word in the line (so none in its message,
            # a suffix of it): only a level of err or worse (the fallback reads it) can still make
            # something of it. Its clock is not read: only a line that fires or folds uses it.
            prio = kernel_priority(text)
            if prio is None or prio > ALARM_PRIORITY:
                self.stats.skipped += 1
                return []
        stamped = split_timestamp(text, now=self._now)
        if stamped.mono is not None:
            echoes.clock = ("mono", stamped.mono)
        else:
            wall = stamped.ts if stamped.ts is not None else ts
            echoes.clock = None if wall is None else ("wall", wall)
        msg = stamped.message
        if self._benign.match(msg) is not None:
            self.stats.recognised += 1
            self.stats.benign += 1
            return []  # known noise (parsing/benign.toml): no rule may act on it
        found = self._code(msg, text)
        if found and kernel_quiet.by_own_word(found, Severity(_own_level(msg, text), ()), None):
            # The code's records (Xid, OOM kill, stalls, AER, MCE) are printed at warning or worse:
            # one whose line carries info or below acts no more than a rule's (their own words of
            # recovery, an MCE's "corrected", the code reads itself). The level only: no word scan.
            self.stats.quieted += 1
        if found is None:
            found = self._rules.for_subsystem(subsystem_of(msg)).match(msg, text, self._echoes.seen)
            if found:
                rule = self._rule_by_id.get(found[0][1].get("rule", ""))
                if kernel_quiet.by_own_word(found, severity_of(msg, text), rule) or kernel_quiet.outside_the_job(found, msg, rule):
                    self.stats.quieted += 1
        if found is None:
            sev = severity_of(msg, text)
            found, basis = fallback.kernel_line(msg, text, sev)
            if basis == "subsystem" and found and found[0][1].get("fault") == "unknown":
                # A driver the subsystem table keeps outside the job (i915's display GPU) whose device says it hung or
                # failed a reset: the device's class, read as any vendor's, still recorded only (parsing.accelerator_state).
                reading = state_grammar.read_state(msg, text, self.source)
                if reading is not None and reading.rule == "accelerator_state":
                    found, basis = [state_grammar.grammar_event(reading, text)], "grammar"
            if basis == "subsystem":
                self.stats.by_subsystem += 1
            elif basis == "model":
                self.stats.by_model += 1
            elif basis != "grammar" and (reading := state_grammar.read_state(msg, text, self.source)) is not None:
                # No subsystem or model took the line, but it says a device or node is in a bad state (issue 54)
                found = [state_grammar.grammar_event(reading, text)]
            if found is None:
                if not self._realigning and (again := self._realigned(text, msg, ts)):
                    return again
                self.stats.skipped += 1
                self._unrecognised(msg, sev)
                return []
        if kernel_quiet.at_boot(found, stamped.mono, self._live_from):
            self.stats.boot += 1
        elif kernel_quiet.unused_device(found, msg) or kernel_quiet.display_engine(found, msg) or kernel_quiet.no_such_device(found, msg):
            self.stats.quieted += 1
        self.stats.recognised += 1
        self.stats.events += len(found)
        return [ParsedLine(self.source, kind, data, stamped.ts, stamped.mono) for kind, data in found]

    def _realigned(self, text: str, msg: str, ts: float | None) -> list[ParsedLine]:
        """A line that gave nothing, read again from where a format this parser knows begins inside
        it (parsing.realign), behind the level its cut-off prefix stated in dmesg -x's columns (the
        level readers take it from there). The first reading that gives events is the line's; the
        line is counted once."""
        def read(again: realign.Realigned) -> list[ParsedLine]:
            self._realigning = True
            try:
                out = self.feed(realign.dmesg_level_prefix(again.level) + again.line, ts=ts)
            finally:
                self._realigning = False
            self._echoes.n -= 1
            return out

        return realign.first_reading(realign.candidates(text, msg, programs=False), self.stats, read)

    def _unrecognised(self, msg: str, sev: Severity) -> None:
        # An Xid or SXid record the driver's reader could not parse is a GPU or NVSwitch fault
        # whatever its words: always counted and shown, never dropped as quiet.
        gpu_record = "NVRM: Xid" in msg or "SXid" in msg
        if gpu_record or sev.alarming or (sev.priority is not None and sev.priority <= ALARM_PRIORITY):
            self.stats.alarming += 1
            if self.on_unrecognised is not None:
                self.on_unrecognised(msg)

    def flush(self) -> list[ParsedLine]:
        """Nothing waits in this parser (records are emitted on their first line); forget context."""
        self._echoes.clear()
        self._gpu.clear()
        return []

    # -- dispatch: the code's records first (they fold over several lines), then the catalogue
    # (parsing/rules.toml and the user's --rules files) for the lines the code left (feed) ----------
    def _code(self, msg: str, raw: str) -> list[tuple[str, dict[str, Any]]] | None:
        if "Kernel panic" in msg or "Kernel Panic" in msg:
            # Before the OOM branch: "Kernel panic - not syncing: Out of memory ..." is a panic.
            return kernel_host.stall(msg, raw, self._echoes)
        if "NVRM" in msg or "RC all channels" in msg:  # (round 32) the recovery line a journal took the tag off
            return self._gpu.nvrm(msg, raw)
        if "fallen off the bus" in msg:
            return self._gpu.fallen(msg, raw)
        if "SXid" in msg:
            return self._gpu.sxid(msg, raw)
        if "segfault at" in msg or "traps: " in msg:
            return kernel_host.segfault(msg, raw)
        if "out of memory" in msg or "Out of memory" in msg or "oom-kill:" in msg or "oom kill:" in msg or "oom_reaper" in msg or "Killed process" in msg:
            return kernel_host.oom(msg, raw, self._echoes)
        if "lockup" in msg or "blocked for more than" in msg or "rcu: INFO" in msg:
            return kernel_host.stall(msg, raw, self._echoes)
        if "AER" in msg or "PCIe Bus Error" in msg:
            return kernel_host.aer(msg, raw, self._echoes)
        if "EDAC" in msg or "mce:" in msg or "[Hardware Error]: " in msg:
            return kernel_host.machine_check(msg, raw, self._echoes)
        if "NETDEV WATCHDOG" in msg:
            return netdev_watchdog_events(msg, raw, self._echoes.seen)
        lower = msg.lower()
        if "mlx" in msg or "link" in lower or "port" in lower or "carrier o" in lower:
            return nic_events(msg, raw, self._echoes.seen)
        return None
