"""parsing.xid_verdict owns what an Xid means: the kernel parser's event carries its verdict, and
diagnosis reaches the same verdict from the fields docs/events.md documents for a kernel ``xid``
(``xid``, ``text``), whoever wrote the event."""

from __future__ import annotations

import pytest

from faultlens.diagnosis.rules.xid import XidRule
from faultlens.events.envelope import Envelope
from faultlens.parsing.kernel_log import KernelLogParser
from faultlens.parsing.xid_table import lookup
from faultlens.parsing.xid_verdict import xid_verdict

# Real lines of the driver (tests/parsing samples' forms): a plain code, the NVLink5 decode (144-150)
# and Xid 154's recovery action, which refine the table's entry.
T = 1.8e9
LINES = {
    48: "NVRM: Xid (PCI:0000:9a:00): 48, pid=4104, name=python, An uncorrectable double bit error (DBE) has been detected",
    94: "NVRM: Xid (PCI:0000:3b:00): 94, pid=91, name=python, Contained: SM (0x1). RST: No, D-RST: No",
    145: "NVRM: Xid (PCI:0000:3b:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 00 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
    154: "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
    43: "NVRM: Xid (PCI:0000:3b:00): 43, pid=1234, name=python, Ch 00000010",
}


def _parsed(code: int) -> dict:
    [event] = KernelLogParser(now=1.8e9).feed(f"[ 5000.0] {LINES[code]}")
    assert event.kind == "xid"
    return event.data


@pytest.mark.parametrize("code", sorted(LINES))
def test_the_parsers_event_carries_the_verdict_of_its_code_and_text(code):
    data = _parsed(code)
    v = xid_verdict(code, data["text"])
    assert (data["fault"], data["action"], data["severity"], data["sympathetic"], data["mnemonic"]) == (
        v.fault, v.action, v.severity, v.sympathetic, v.mnemonic)


def test_the_message_refines_the_table():
    v = xid_verdict(154, _parsed(154)["text"])
    assert (v.fault, v.action) == ("gpu_reset_required", "evict")
    assert lookup(154).action == "none"  # the code alone says nothing
    decoded = xid_verdict(145, _parsed(145)["text"])
    assert decoded.intrinfo == 0x004505C6 and decoded.subcode


def _outsider(code: int, **extra) -> Envelope:
    """A kernel xid event as a producer reading docs/events.md alone may write it: no fault or action."""
    data = {"xid": code, "pci": "0000:3b:00", "text": _parsed(code)["text"], **extra}
    return Envelope(ts=T, job="j", node="n001", source="kernel", kind="xid", data=data, id="e1")


@pytest.mark.parametrize("code", [48, 94, 145, 154])
def test_diagnosis_reaches_the_parsers_verdict_from_the_documented_fields(code):
    data = _parsed(code)
    ours = XidRule().observe(Envelope(ts=T, job="j", node="n001", source="kernel", kind="xid", data=data, id="e1"))
    theirs = XidRule().observe(_outsider(code))
    assert [(f.fault, f.action, f.sympathetic, f.hold_s) for f in ours] == [(f.fault, f.action, f.sympathetic, f.hold_s) for f in theirs]


def test_a_recovery_that_asks_for_a_reboot_is_blamed_not_an_echo():
    # The table calls 154 an echo (a notice about another error); the driver's "Node Reboot
    # Required" is the node's own fault. Diagnosis used the table's flag and dropped it unheard.
    [f] = XidRule().observe(Envelope(ts=T, job="j", node="n001", source="kernel", kind="xid", data=_parsed(154), id="e1"))
    assert (f.fault, f.action, f.sympathetic) == ("gpu_reset_required", "evict", False)


def test_xid_43_needs_the_nodes_history_which_only_diagnosis_has():
    assert xid_verdict(43).sympathetic and xid_verdict(43).action == lookup(43).action  # one line: NVIDIA's reading
    alone = xid_verdict(43, after_app_xid=False)
    assert (alone.fault, alone.action, alone.sympathetic) == ("app_fault", "reattempt", False)
    assert xid_verdict(43, after_app_xid=True).sympathetic
    rule = XidRule()
    assert [(f.fault, f.action, f.sympathetic) for f in rule.observe(_outsider(43))] == [("app_fault", "reattempt", False)]


def test_any_code_and_text_get_a_verdict_of_known_names():
    import random

    from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES

    rng = random.Random(5)
    texts = ["", *LINES.values(), "to 0x9 (Drain)", "X (0xzz 0x1)", "NETIR_LINK_EVT Fatal (0xffffffff 0xffffffff)"]
    for _ in range(2000):
        v = xid_verdict(rng.choice([-1, 0, 43, 79, 144, 150, 154, 999, 10**9, rng.randrange(200)]), rng.choice(texts),
                        after_app_xid=rng.choice([None, True, False]))
        assert v.fault in FAULT_CLASSES and v.action in ACTIONS and v.severity in ("fatal", "error", "warn", "info")
