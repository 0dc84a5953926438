"""The line catalogue (parsing/rules.toml): every rule's real example comes out with the rule's
kind, fault and action; a user's --rules file adds rules after the shipped ones; bad files fail
with a message naming the rule."""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from faultlens.parsing.rules import RuleError, load, parse_catalogue, shipped

CASES = [(r, src, ex) for r in shipped() for src in (("kernel", "nccl") if r.source == "any" else (r.source,)) for ex in r.examples]


def test_every_rule_has_a_real_example_with_provenance():
    assert len(shipped()) >= 30
    for rule in shipped():
        assert rule.examples, rule.id
        assert all(ex.line and ex.provenance for ex in rule.examples), rule.id


@pytest.mark.parametrize("rule,source,example", CASES, ids=[f"{r.id}-{i}" for i, (r, _, _) in enumerate(CASES)])
def test_example_parses_as_its_rule_says(rule, source, example):
    events = parser_for(source).feed(example.line)
    assert events, f"{rule.id}: {example.line!r} printed nothing"
    first = events[0]
    # An example logged at boot, or whose own level says info, is recorded with action none: the
    # example says so (parsing/kernel_quiet.py); the class is the rule's either way.
    assert (first.kind, first.data["fault"], first.data["action"]) == (rule.kind, rule.fault, example.action or rule.action)
    if example.action and example.action != rule.action:
        assert first.data.get("boot") or first.data.get("quiet"), example.line


def test_every_rule_acts_on_at_least_one_of_its_examples():
    # A rule whose every example is quieted (boot, info) would never be seen acting in a test.
    for rule in shipped():
        assert any(not ex.action or ex.action == rule.action for ex in rule.examples), rule.id


def test_catalogue_line_and_code_line_of_one_oom_fold_together():
    p = parser_for("kernel")
    # kubernetes/node-problem-detector test/kernel_log_generator/problems/oom_kill
    first = p.feed("Memory cgroup out of memory: Kill process 1012 (heapster) score 1035 or sacrifice child")
    second = p.feed("Killed process 1012 (heapster) total-vm:327128kB, anon-rss:306328kB, file-rss:11132kB, shmem-rss:12345kB")
    assert [e.kind for e in first] == ["oom_kill"] and second == []


def test_panic_naming_oom_is_a_panic():
    # A panic (the machine goes down: evict) whose cause is host memory (host_oom, issue 54 round 41).
    p = parser_for("kernel")
    (event,) = p.feed("Kernel panic - not syncing: Out of memory and no killable processes...")
    assert (event.kind, event.data["fault"], event.data["action"]) == ("panic", "host_oom", "evict")


def test_user_rules_are_added_after_the_shipped_ones(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        "[[rule]]\nid = 'site.bmc_fan'\nsource = 'kernel'\npattern = 'ipmi: fan (?P<fan>\\d+) failed'\n"
        "kind = 'bmc_error'\nfault = 'kernel'\naction = 'alert'\n"
    )
    rules = load([f])
    assert rules[: len(shipped())] == shipped() and rules[-1].id == "site.bmc_fan"
    (event,) = parser_for("kernel", rules).feed("ipmi: fan 3 failed")
    assert event.kind == "bmc_error" and event.data["fan"] == 3 and event.data["rule"] == "site.bmc_fan"
    assert parser_for("kernel").feed("ipmi: fan 3 failed") == []


@pytest.mark.parametrize(
    "text,words",
    [
        ("[[rule]]\nid='x'\npattern='a'\nkind='k'\nfault='disk'\naction='evict'\n", "not a fault class"),
        ("[[rule]]\nid='x'\npattern='('\nkind='k'\nfault='kernel'\naction='evict'\n", "bad pattern"),
        ("[[rule]]\nid='x'\npattern='a'\nkind='k'\nfault='kernel'\naction='reboot'\n", "not an action"),
        ("[[rule]]\nid='x'\npattern='(?P<fault>a)'\nkind='k'\nfault='kernel'\naction='evict'\n", "reserved"),
        ("[[rule]]\nid='x'\npattern='a'\nkind='k'\nfault='kernel'\naction='evict'\nfold=['dev']\n", "fold"),
        ("rule = 3 3", "not TOML"),
        ("[[rule]]\nid='x'\npattern='a'\nkind='k'\nfault='kernel'\naction='alert'\nneedles='abc'\n", "needles must be a list"),
        ("[[rule]]\nid='x'\npattern='a'\nkind='k'\nfault='kernel'\naction='alert'\nscope='rack'\n", "scope"),
    ],
)
def test_bad_catalogue_is_refused_with_a_reason(text, words):
    with pytest.raises(RuleError, match=words):
        parse_catalogue(text, "mine.toml")
