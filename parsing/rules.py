"""The line-rule catalogue: single-line faults described as data (``parsing/rules.toml``) rather
than code, so a user teaches faultlens a new line with a TOML file (``--rules FILE``) instead of a
patch.

Code keeps what a regex cannot say: the Xid table decode, records folded over several lines,
tracebacks. The parsers consult the catalogue only for lines their code did not claim, in file
order (shipped rules first, then each user file), the first matching rule wins.

A rule::

    [[rule]]
    id = "storage.nvme_disabled"          # unique; events carry it as data.rule
    source = "kernel"                      # kernel, nccl or any
    needles = ["nvme"]                     # optional: the regex runs only on lines holding one
    pattern = 'nvme (?P<device>nvme\\d+): Disabling device after reset failure'
    kind = "disk_error"                    # the event kind (docs/events.md)
    fault = "storage"                      # a fault class of events.diagnosis_record
    action = "evict"                       # the first action
    severity = "fatal"                     # fatal, error, warn, info (default error)
    fold = ["device"]                      # optional: echoes with the same groups fold into one event
    scope = "job"                          # optional: the fault is the job's, not this node's (an NFS server)
    fold_as = "oom"                        # optional: share the fold keys of another record (the code's OOM);
                                           # alone (no fold groups), every match within the window folds
    printk_level = "notice"                # optional: the level the kernel prints this message at, when
                                           # below warning (a kernel line at a lower level than this, or
                                           # one that says its trouble was corrected, is recorded, not acted on)
    [[rule.example]]
    line = "nvme nvme4: Disabling device after reset failure: -19"
    provenance = "leptonai/gpud components/disk/kmsg_matcher_test.go"
    action = "none"                        # optional: what this example gives when not the rule's action
                                           # (a line at info level, or logged while the machine booted)

Named groups of the pattern become data keys (integers, signed too, as ints).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES
from faultlens.parsing.line import common
from faultlens.parsing.needles import NeedleScan, required, scan
from faultlens.parsing.subsystems import subsystem_of
from faultlens.parsing.timestamps import split_timestamp

SHIPPED = Path(__file__).resolve().parent / "rules.toml"
SOURCES = ("kernel", "nccl", "any")
SEVERITIES = ("fatal", "error", "warn", "info")
PRINTK_LEVELS = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warning": 4, "notice": 5, "info": 6, "debug": 7}

Found = list[tuple[str, dict[str, Any]]]
Seen = Callable[[tuple[str, Any]], bool]


class RuleError(ValueError):
    """A catalogue file that cannot be used; the message names the file and the rule."""


@dataclass(frozen=True)
class Example:
    line: str
    provenance: str
    action: str = ""  # what the example gives when not the rule's action (its own level, boot)


@dataclass(frozen=True)
class LineRule:
    id: str
    source: str
    pattern: re.Pattern[str]
    kind: str
    fault: str
    action: str
    severity: str
    needles: tuple[str, ...] = ()
    fold: tuple[str, ...] = ()
    fold_as: str = ""
    scope: str = "node"
    examples: tuple[Example, ...] = ()
    origin: str = ""
    # The kernel subsystems (parsing/subsystems.toml names) whose lines this rule reads: the key
    # `subsystems`, else those of its examples when every example has one; () = any line.
    subsystems: tuple[str, ...] = ()
    # The syslog level (parsing.severity) the kernel prints the rule's message at: a kernel line
    # stating a lower level (a greater number) is recorded, not acted on. Warning unless said.
    printk_level: int = 4

    def applies_to(self, source: str) -> bool:
        return self.source == "any" or self.source == source


def _rule(raw: Any, origin: str, index: int) -> LineRule:
    where = f"{origin}: rule {index + 1}"
    if not isinstance(raw, dict):
        raise RuleError(f"{where}: a [[rule]] table expected")
    rid = raw.get("id")
    if not isinstance(rid, str) or not rid:
        raise RuleError(f"{where}: needs a string id")
    where = f"{origin}: rule {rid!r}"
    unknown = set(raw) - {"id", "source", "pattern", "kind", "fault", "action", "severity", "needles", "fold", "fold_as", "scope", "example", "why",
                          "subsystems", "printk_level"}
    if unknown:
        raise RuleError(f"{where}: unknown keys {sorted(unknown)}")
    source = raw.get("source", "kernel")
    if source not in SOURCES:
        raise RuleError(f"{where}: source must be one of {SOURCES}, got {source!r}")
    try:
        pattern = re.compile(str(raw["pattern"]))
    except KeyError:
        raise RuleError(f"{where}: needs a pattern") from None
    except re.error as exc:
        raise RuleError(f"{where}: bad pattern: {exc}") from None
    kind, fault, action = raw.get("kind"), raw.get("fault"), raw.get("action")
    if not isinstance(kind, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", kind):
        raise RuleError(f"{where}: kind must be a lower_snake name, got {kind!r}")
    if fault not in FAULT_CLASSES:
        raise RuleError(f"{where}: fault {fault!r} is not a fault class (one of {', '.join(FAULT_CLASSES)})")
    if action not in ACTIONS:
        raise RuleError(f"{where}: action {action!r} is not an action (one of {', '.join(ACTIONS)})")
    severity = raw.get("severity", "error")
    if severity not in SEVERITIES:
        raise RuleError(f"{where}: severity must be one of {SEVERITIES}")
    for key in ("needles", "fold"):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise RuleError(f"{where}: {key} must be a list of non-empty strings")
    fold = tuple(raw.get("fold", ()))
    missing = [g for g in fold if g not in pattern.groupindex]
    if missing:
        raise RuleError(f"{where}: fold names groups the pattern lacks: {missing}")
    reserved = set(pattern.groupindex) & {"line", "fault", "action", "severity", "rule"}
    if reserved:
        raise RuleError(f"{where}: group names {sorted(reserved)} are reserved for the event's own keys")
    scope = raw.get("scope", "node")
    if scope not in ("node", "job"):
        raise RuleError(f"{where}: scope must be node or job, got {scope!r}")
    examples = tuple(Example(str(e.get("line", "")), str(e.get("provenance", "")), str(e.get("action", "")))
                     for e in raw.get("example", ()) if isinstance(e, dict))  # fmt: skip
    if any(e.action and e.action not in ACTIONS for e in examples):
        raise RuleError(f"{where}: an example's action is not an action")
    level = raw.get("printk_level", "warning")
    if level not in PRINTK_LEVELS:
        raise RuleError(f"{where}: printk_level must be one of {', '.join(PRINTK_LEVELS)}")
    subs = raw.get("subsystems")
    if subs is not None and (not isinstance(subs, list) or not all(isinstance(v, str) and v for v in subs)):
        raise RuleError(f"{where}: subsystems must be a list of subsystem names")
    return LineRule(rid, source, pattern, kind, fault, action, severity, tuple(raw.get("needles", ())), fold,
                    str(raw.get("fold_as") or ""), scope, examples, origin,
                    tuple(subs) if subs is not None else _subsystems_of(source, examples), PRINTK_LEVELS[level])


def _subsystems_of(source: str, examples: tuple[Example, ...]) -> tuple[str, ...]:
    """The subsystems every example of a kernel rule is attributed to; () when one has none (then
    the rule is tried on every line)."""
    if source != "kernel" or not examples:
        return ()
    names = []
    for e in examples:
        name = subsystem_of(split_timestamp(e.line).message)
        if name is None:
            return ()
        names.append(name)
    return tuple(sorted(set(names)))


def parse_catalogue(text: str, origin: str) -> tuple[LineRule, ...]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{origin}: not TOML: {exc}") from None
    rules = tuple(_rule(r, origin, i) for i, r in enumerate(doc.get("rule", ())))
    seen: set[str] = set()
    for r in rules:
        if r.id in seen:
            raise RuleError(f"{origin}: rule id {r.id!r} twice")
        seen.add(r.id)
    return rules


@lru_cache(maxsize=1)
def shipped() -> tuple[LineRule, ...]:
    return parse_catalogue(SHIPPED.read_text(encoding="utf-8"), str(SHIPPED.name))


def load(paths: Iterable[str | Path] = ()) -> tuple[LineRule, ...]:
    """The shipped rules then each file's, in order (a user rule cannot shadow a shipped one's
    line; it adds what the catalogue lacks). Raises RuleError with a readable reason."""
    rules = list(shipped())
    for p in paths:
        try:
            text = Path(p).read_text(encoding="utf-8")
        except OSError as exc:
            raise RuleError(f"{p}: cannot read: {exc.strerror or exc}") from None
        rules.extend(parse_catalogue(text, str(p)))
    return tuple(rules)


@dataclass(frozen=True)
class RuleSet:
    """The rules of one source, ready to match: the first rule, in catalogue order, one of whose
    needles the line holds (every rule without needles is tried on every line) and whose pattern
    is found in it. Built once per rule tuple (RuleSet.of): every parser of a process shares it."""

    rules: tuple[LineRule, ...]
    # Which rules a line may match, found from the needles it holds in one scan (parsing.needles:
    # most lines hold none and are settled by it) rather than by testing each rule's needles in
    # turn; None when no rule has needles.
    _needles: NeedleScan | None = field(init=False, repr=False, compare=False, default=None)
    _rules_of: dict[str, tuple[int, ...]] = field(init=False, repr=False, compare=False, default_factory=dict)
    # The rules without needles (indices, and the rules themselves): candidates on every line.
    _always: tuple[int, ...] = field(init=False, repr=False, compare=False, default=())
    _always_rules: tuple[LineRule, ...] = field(init=False, repr=False, compare=False, default=())
    # Dispatch on the subsystem before any needle or regex: a line of subsystem S is tried on the
    # rules of S and the rules of no subsystem, in catalogue order; a line of none on every rule.
    _by_subsystem: dict[str | None, "RuleSet"] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        always = tuple(i for i, r in enumerate(self.rules) if not r.needles)
        object.__setattr__(self, "_always", always)
        object.__setattr__(self, "_always_rules", tuple(self.rules[i] for i in always))
        for i, rule in enumerate(self.rules):
            for n in dict.fromkeys(rule.needles):
                self._rules_of[n] = (*self._rules_of.get(n, ()), i)
        if self._rules_of:
            object.__setattr__(self, "_needles", scan(frozenset(self._rules_of)))

    @classmethod
    def of(cls, rules: Iterable[LineRule]) -> "RuleSet":
        """The rule set of ``rules``, built once: a parser is made per node's stream, and the
        needle tries of the set and of each subsystem's subset cost more than thousands of lines."""
        return _built(tuple(rules))

    def for_subsystem(self, subsystem: str | None) -> "RuleSet":
        """The rules a line of ``subsystem`` may match; a line of no known subsystem (None: no tag,
        or a prefix the tag reading does not know) is tried on every rule."""
        if subsystem is None:
            return self
        found = self._by_subsystem.get(subsystem)
        if found is None:
            found = RuleSet(tuple(r for r in self.rules if not r.subsystems or subsystem in r.subsystems))
            self._by_subsystem[subsystem] = found
        return found

    @classmethod
    def for_source(cls, source: str, rules: Sequence[LineRule] | None = None) -> "RuleSet":
        return cls.of(r for r in (shipped() if rules is None else rules) if r.applies_to(source))

    def match(self, msg: str, raw: str, seen: Seen | None = None) -> Found | None:
        """Events of the first rule matching ``msg``; [] when it folds into one just emitted; None: no rule."""
        for rule in self._candidates(msg):
            m = rule.pattern.search(msg)
            if m is None:
                continue
            groups = {k: (int(v) if v.lstrip("-").isdigit() else v) for k, v in m.groupdict().items() if v is not None}
            if (rule.fold or rule.fold_as) and seen is not None and seen(_fold_key(rule, groups)):
                return []
            data = common(raw, rule.fault, rule.action, rule.severity, rule=rule.id, **groups)
            if rule.scope == "job":
                data["scope"] = "job"
            data.setdefault("text", m.group(0)[:512])
            return [(rule.kind, data)]
        return None

    def _candidates(self, msg: str) -> Sequence[LineRule]:
        """The rules whose needles ``msg`` holds and those without needles, in catalogue order."""
        held = self._needles.found(msg) if self._needles is not None else None
        if not held:
            return self._always_rules
        rules_of = self._rules_of
        found = {i for n in held for i in rules_of[n]}.union(self._always)
        if len(found) == 1:
            return (self.rules[found.pop()],)
        return [self.rules[i] for i in sorted(found)]


@lru_cache(maxsize=64)
def _built(rules: tuple[LineRule, ...]) -> RuleSet:
    return RuleSet(rules)


# A pre-filter word its parser calls broad costs this much more than another (gate_words).
BROAD = 100


def gate_words(rules: Sequence[LineRule], base: Iterable[str], broad: Iterable[str] = ()) -> set[str]:
    """Lowered literals to add to a parser's pre-filter of ``base`` words (lowered) so that every
    line one of ``rules`` matches holds one: for each rule its needles, unless its pattern offers
    a set every match holds (parsing.needles.required) that adds no word (``base`` passes each
    already, or it is not ASCII: such lines are rare), or its needles hold a ``broad`` word (the
    parser's words on every line of a driver: NVRM) and the pattern's set adds fewer. A rule
    matches only lines holding a needle AND its pattern, so either set lets through every line it
    could take; the needle "NVRM" let every line of the driver through for a rule that wants
    "heartbeat" or "timed out" after it."""
    return set(_gate(tuple(rules), frozenset(base), frozenset(w.lower() for w in broad)))


@lru_cache(maxsize=16)
def _gate(rules: tuple[LineRule, ...], base: frozenset[str], broad: frozenset[str]) -> frozenset[str]:
    # Built once per rule tuple: reading 100 patterns takes 50 ms, and a parser is made per stream.
    def cost(words: frozenset[str]) -> int:
        # A word the pre-filter holds already (or not ASCII) adds nothing; a broad one every line
        # of its driver; a short one (": ", "io") more lines than a long one.
        return sum(BROAD if w.strip(" :[]()_-0123456789") in broad else max(1, 8 - len(w))
                   for w in words if w.isascii() and not any(b in w for b in base))

    out: set[str] = set()
    for rule in rules:
        needles = frozenset(n.lower() for n in rule.needles)
        best = min((needles, *required(rule.pattern, cost)), key=cost)  # the needles on a tie
        out |= best if cost(best) == 0 or cost(needles) >= BROAD else needles
    return frozenset(w for w in out if not any(b in w for b in base))  # what base passes needs no word of its own



def _fold_key(rule: LineRule, groups: dict[str, Any]) -> tuple[str, Any]:
    values = tuple(groups.get(g) for g in rule.fold)
    # One group folds under the same key shape the code uses (("oom", pid)), so a catalogue line
    # and a code line about one fault fold together.
    return (rule.fold_as or rule.id, values[0] if len(values) == 1 else values)


# Fold keys the code shares with catalogue rules (parsing.kernel_log reads them).
OOPS_KEY = ("oops", ())
OOM_HEAD_KEY = ("oom_head", ())
