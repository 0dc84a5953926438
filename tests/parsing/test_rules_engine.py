"""The rule catalogue's matching engine (parsing.rules.RuleSet, parsing.needles): however it finds
the candidate rules, a line gets the first rule in catalogue order one of whose needles it holds
(a rule without needles: any line) and whose pattern is found in it. Checked against that
definition written as the plain loop, on every line we hold, as written and lowered, for each
source's rules, their subset for the line's subsystem, and rule sets that mix rules without needles."""

from __future__ import annotations

import re

import pytest

from bench.bench_parsers import held_lines
from faultlens.parsing import kernel_log
from faultlens.parsing.line import any_of
from faultlens.parsing.needles import NeedleScan, required
from faultlens.parsing.rules import LineRule, RuleSet, _fold_key, gate_words, load, shipped
from faultlens.parsing.subsystems import subsystem_of
from faultlens.parsing.timestamps import split_timestamp


def _reference(rules: tuple[LineRule, ...], msg: str) -> tuple[str, tuple] | None:
    """The first rule matching ``msg`` by the definition: (its id, its groups)."""
    for rule in rules:
        if rule.needles and not any(n in msg for n in rule.needles):
            continue
        m = rule.pattern.search(msg)
        if m is not None:
            return rule.id, (m.group(0), tuple(sorted((k, v) for k, v in m.groupdict().items() if v is not None)))
    return None


def _matched(rule_set: RuleSet, msg: str) -> tuple[str, tuple] | None:
    folds: list = []
    found = rule_set.match(msg, msg, lambda key: folds.append(key) or False)
    if found is None:
        return None
    ((_, data),) = found
    rule = next(r for r in rule_set.rules if r.id == data["rule"])
    m = rule.pattern.search(msg)
    assert m is not None
    groups = {k: v for k, v in m.groupdict().items() if v is not None}
    assert data["text"] == groups.get("text", m.group(0)[:512])
    assert folds == ([_fold_key(rule, {k: data[k] for k in groups})] if rule.fold or rule.fold_as else [])
    return rule.id, (m.group(0), tuple(sorted(groups.items())))


@pytest.fixture(scope="module")
def messages() -> list[str]:
    out = {}
    for lines in held_lines().values():
        for line in lines:
            msg = split_timestamp(line).message
            out[msg] = None
            out[msg.lower()] = None
    return list(out)


@pytest.fixture(scope="module")
def takes(messages):
    """Each source's rules (catalogue order) and, for every message, the rules that take it by the
    definition, as (rule index, match) in catalogue order: a rule takes a line holding one of its
    needles (a rule without needles: any line) in which its pattern is found. Read once per
    message and source, here, by each needle's lines, for the tests that ask which rule comes first
    (whole set or subset) and what every taken line holds; the line-by-line loop (_reference) read
    every line once per rule set and test."""
    found: dict[str, tuple[tuple[LineRule, ...], list[list[tuple[int, re.Match]]]]] = {}
    for source in ("kernel", "nccl"):
        rules = tuple(r for r in shipped() if r.applies_to(source))
        holding: dict[str, set[int]] = {}
        for needle in {n for r in rules for n in r.needles}:
            holding[needle] = {i for i, msg in enumerate(messages) if needle in msg}
        per_line: list[list[tuple[int, re.Match]]] = [[] for _ in messages]
        for at, rule in enumerate(rules):
            lines = set().union(*(holding[n] for n in rule.needles)) if rule.needles else range(len(messages))
            for i in sorted(lines):
                if (m := rule.pattern.search(messages[i])) is not None:
                    per_line[i].append((at, m))
        found[source] = rules, per_line
    return found


def _reading(rule: LineRule, m: re.Match) -> tuple[str, tuple]:
    return rule.id, (m.group(0), tuple(sorted((k, v) for k, v in m.groupdict().items() if v is not None)))


@pytest.mark.parametrize("source", ["kernel", "nccl"])
def test_first_rule_is_the_definitions_on_every_line_we_hold(source, messages, takes):
    rules, per_line = takes[source]
    whole = RuleSet.for_source(source)
    assert whole.rules == rules
    # A subset's first rule is its first in catalogue order among the rules taking the line: its
    # rules are the whole set's, in the whole set's order.
    positions: dict[int, frozenset[int]] = {id(whole): frozenset(range(len(rules)))}
    hits = 0
    for msg, taken in zip(messages, per_line, strict=True):
        subset = whole.for_subsystem(subsystem_of(msg))
        if id(subset) not in positions:
            at = [rules.index(r) for r in subset.rules]
            assert at == sorted(set(at)), (source, subsystem_of(msg))
            positions[id(subset)] = frozenset(at)
        for rule_set in {id(whole): whole, id(subset): subset}.values():
            mine = positions[id(rule_set)]
            want = next((_reading(rules[at], m) for at, m in taken if at in mine), None)
            assert _matched(rule_set, msg) == want, (source, rule_set is whole, msg)
            hits += want is not None
    assert len(messages) > 10_000 and hits > 100


def test_rules_without_needles_are_tried_on_every_line_in_catalogue_order(tmp_path, messages):
    mine = tmp_path / "mine.toml"
    mine.write_text(
        # No needles: tried on every line, after the shipped rules that come before it in the file order.
        "[[rule]]\nid = 'site.any_timeout'\nsource = 'kernel'\npattern = '(?i)timed? ?out'\nkind = 'site_timeout'\n"
        "fault = 'kernel'\naction = 'alert'\n"
        "[[rule]]\nid = 'site.nvrm'\nsource = 'kernel'\nneedles = ['NVRM', 'NVRM: Xid']\npattern = 'NVRM: (?P<what>\\w+)'\n"
        "kind = 'site_nvrm'\nfault = 'kernel'\naction = 'alert'\n"
    )
    rules = tuple(r for r in load([mine]) if r.applies_to("kernel"))
    for subset in (rules, rules[-2:], rules[-1:] + rules[:5] + rules[-2:-1]):
        rule_set = RuleSet(subset)
        for msg in messages[::7]:
            assert _matched(rule_set, msg) == _reference(subset, msg), msg


def test_rule_sets_are_built_once_per_rules():
    assert RuleSet.for_source("kernel") is RuleSet.for_source("kernel")
    whole = RuleSet.for_source("kernel")
    assert whole.for_subsystem("nvrm") is RuleSet.for_source("kernel").for_subsystem("nvrm")
    assert RuleSet.for_source("kernel", load()) is whole  # an equal tuple of rules: the same set


WORDS = ["time", "timeout", " D ", "D state", "NVRM", "NVRM: Xid", "xid", "x", "err", "error ", "ab", "b", "abc", "bc",
         "0x00000062", "[drm:dm_", "\u6b7b\u9501"]


@pytest.mark.parametrize("text", ["", "timed out", "a D b", "NVRM: Xid 79", "task in D state", "abc", "xab", "aab", "bcab",
                                  "err 0x00000062", "[drm:dm_plane] error ", "x", "Xid", "\u6b7b\u9501 at 3", "D", " D",
                                  "tim", "D D D ", "ababc"])
def test_the_scan_finds_exactly_the_literals_a_text_holds(text):
    scan = NeedleScan(WORDS)
    assert scan.found(text) == {w for w in WORDS if w in text}
    assert bool(scan.pattern.search(text)) == any(w in text for w in WORDS)
    # any_of's pattern stays one alternation: a caller's "|x" is an alternative of it, not of its last branch
    extra = re.compile(any_of(WORDS).pattern + r"|\bzz\b")
    assert bool(extra.search(text + " zz")) and bool(extra.search(text)) == any(w in text for w in WORDS)


def test_the_scan_is_entered_at_rare_characters():
    # The kernel pre-filter's literals start with nearly every letter, the space and 0: the scan enters at few.
    scan = NeedleScan({n.lower() for r in shipped() for n in r.needles})
    starts = {w[o] for w, o in scan._offset.items()}
    assert len(starts) < len({w[0] for w in scan._offset}) and not starts & set(" e0")


def _cost(words: frozenset[str]) -> int:
    return sum(map(len, words))


@pytest.mark.parametrize("pattern,text", [
    (r"(?i:\btime ?out\b|timed out)", "GSP TİMED OUT"),  # İ lowers to i + U+0307
    (r"(?i:\btime ?out\b|timed out)", "tımeout"),
    (r"(?i)memory subsystem error", "MEMORY SUBſYSTEM ERROR"),
    (r"NVRM: (?:GPU\d+ )?RPC (?:event )?history \(CPU", "NVRM: GPU3 RPC event history (CPU -> GSP)"),
    (r"nvidia-peermem (?:(?P<func>\w+):\d+ )?ERROR (?P<what>.*)", "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected"),
    (r"(?:a|b)+c(?=dd)x?", "abacdd"),
])
def test_every_set_required_of_a_pattern_is_in_each_match(pattern, text):
    compiled = re.compile(pattern)
    m = compiled.search(text)
    sets = required(compiled, _cost)
    assert m is not None and sets
    for words in sets:
        assert any(w in m.group(0).lower() for w in words), (words, m.group(0))


def test_every_line_a_rule_takes_holds_one_of_its_prefilter_words(messages, takes):
    rules, per_line = takes["kernel"]
    assert rules == RuleSet.for_source("kernel").rules
    base = {"err", "fail", "time"}
    gate = gate_words(rules, base, kernel_log.NARROWED)
    assert "nvrm" not in gate  # gpu.rm_timeout's needle: on every line of the driver
    sets = [required(rule.pattern, _cost) for rule in rules]
    took = 0
    for msg, taken in zip(messages, per_line, strict=True):
        low = msg.lower()
        for at, m in taken:
            took += 1
            assert any(w in low for w in (*gate, *base)), (rules[at].id, msg)
            for words in sets[at]:
                assert any(w in m.group(0).lower() for w in words), (rules[at].id, words, msg)
    assert took > 300
