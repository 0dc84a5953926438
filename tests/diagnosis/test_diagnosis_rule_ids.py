"""Every diagnosis a node rule makes names its rule (Diagnosis.rule, issue 55), through the whole
engine and through the node stage's `summary/finding` record: an Xid its table entry, a catalogue
line its rule id (a user's too), a detector its name. `faultlens rules diff` groups by it."""

from __future__ import annotations

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.rules.base import Finding
from faultlens.events.envelope import Envelope
from faultlens.parsing.rules import load


def _lines(node: str, lines: list[str], t0: float = 1_800_000_000.0) -> list[Envelope]:
    return [Envelope(ts=t0 + i, job="j1", node=node, source="kernel", kind="line", data={"line": line}, id=f"{node}-{i}")
            for i, line in enumerate(lines)]


def _rules(events, config: EngineConfig | None = None) -> list[tuple[str, str | None]]:
    found = analyze(events, Engine(config or EngineConfig(implicit=False, peer_model=False)))
    return [(str(d.fault), d.rule) for d in found if d.fault != "unknown"]


def test_an_xid_names_its_table_entry_and_a_lost_gpu_its_rule():
    # Xid lines as NVIDIA's driver writes them (docs.nvidia.com/deploy/xid-errors): 74 is read by the
    # Xid table, 79 (off the bus) by the lost-GPU rule
    nvlink = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 74, pid=0, NVLink: fatal error detected on link 3"
    assert _rules(_lines("n001", [nvlink])) == [("nvlink", "xid.74")]
    lost = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
    assert _rules(_lines("n002", [lost])) == [("gpu_lost", "gpu_lost")]


def test_a_catalogue_line_names_its_rule_and_a_users_rule_its_id(tmp_path):
    # kubernetes/node-problem-detector test/kernel_log_generator/problems/null_pointer
    found = _rules(_lines("n003", ["BUG: unable to handle kernel NULL pointer dereference at 0000000000000078",
                                   "Oops: 0000 [#1] SMP ", "Kernel panic - not syncing: Fatal exception"]))
    assert [r for _, r in found] and all(r for _, r in found)
    f = tmp_path / "site.toml"
    f.write_text("[[rule]]\nid = 'site.psu'\npattern = 'PSU (?P<device>\\d+) failure'\nkind = 'psu_error'\n"
                 "fault = 'kernel'\naction = 'evict'\n")
    config = EngineConfig(implicit=False, peer_model=False, line_rules=load([f]))
    assert _rules(_lines("n004", ["ipmi: PSU 2 failure detected"]), config) == [("kernel", "site.psu")]


def test_the_rule_crosses_the_node_stage_record():
    f = Finding(job="j", ts=1_800_000_000.0, fault="gpu_lost", action="evict", nodes=("n1",), entity="gpu:0", rule="xid.79")
    back = Finding.from_event(f.to_event("e1.f0"))
    assert back.rule == "xid.79" and back.to_diagnosis().rule == "xid.79"
    plain = Finding(job="j", ts=1_800_000_000.0, fault="nic", action="alert", nodes=("n1",), entity="nic")
    assert "rule" not in plain.to_event("e2.f0").data  # no rule set: the record as it was
    assert Finding.from_event(plain.to_event("e2.f0")).to_diagnosis().rule == "nic"  # the detector's name
