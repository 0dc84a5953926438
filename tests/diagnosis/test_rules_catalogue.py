"""Catalogue events (parsing/rules.toml) reach diagnoses without code: raw kernel lines through
the whole engine. A failing local disk evicts its node; an NFS server outage alerts and evicts
nobody; a user's own rule (--rules) acts as it says."""

from __future__ import annotations

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.envelope import Envelope
from faultlens.parsing.rules import load


def _lines(node: str, lines: list[str], t0: float = 1_800_000_000.0) -> list[Envelope]:
    return [Envelope(ts=t0 + i, job="j1", node=node, source="kernel", kind="line", data={"line": line}, id=f"{node}-{i}")
            for i, line in enumerate(lines)]


def _diagnoses(events, config: EngineConfig | None = None):
    return analyze(events, Engine(config or EngineConfig(implicit=False, peer_model=False)))


def test_failing_local_disk_evicts_its_node():
    # leptonai/gpud components/disk/kmsg_matcher_test.go
    [d] = _diagnoses(_lines("n001", ["[Sun Jun 29 19:28:36 2025] nvme nvme4: Disabling device after reset failure: -19"]))
    assert (d.fault, d.action, d.nodes) == ("storage", "evict", ("n001",))


def test_nfs_server_outage_alerts_and_evicts_nobody():
    # public GitHub file, search-index id 23301959047
    line = "[  207.955868] nfs: server 10.100.0.60 not responding, still trying"
    found = _diagnoses(_lines("n001", [line]) + _lines("n002", [line], t0=1_800_000_000.5))
    assert [(d.fault, d.action, d.nodes) for d in found] == [("storage", "alert", ())]


def test_oops_then_panic_is_one_kernel_eviction():
    # kubernetes/node-problem-detector test/kernel_log_generator/problems/null_pointer
    found = _diagnoses(_lines("n003", ["BUG: unable to handle kernel NULL pointer dereference at 0000000000000078",
                                       "Oops: 0000 [#1] SMP ", "Kernel panic - not syncing: Fatal exception"]))
    assert [(d.fault, d.action, d.nodes) for d in found] == [("kernel", "evict", ("n003",))]


def test_a_users_rule_acts_without_code(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text("[[rule]]\nid = 'site.psu'\npattern = 'PSU (?P<device>\\d+) failure'\nkind = 'psu_error'\n"
                 "fault = 'kernel'\naction = 'evict'\n")
    events = _lines("n004", ["ipmi: PSU 2 failure detected"])
    assert _diagnoses(events) == []  # unknown to the shipped catalogue: nothing acts
    [d] = _diagnoses(events, EngineConfig(implicit=False, peer_model=False, line_rules=load([f])))
    assert (d.fault, d.action, d.nodes) == ("kernel", "evict", ("n004",))


def test_fatal_nvswitch_sxid_evicts_a_nonfatal_one_records():
    # NVIDIA/NVSentinel health-monitors/syslog-health-monitor/pkg/sxid/sxid_handler_test.go
    fatal = _lines("n005", ["nvidia-nvswitch0: SXid (PCI:0004:00:00.0): 26008, SOE Watchdog error"])
    nonfatal = _lines("n006", ["[73309.599396] nvidia-nvswitch0: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Link 04 RX Short Error Rate"])
    assert [(d.fault, d.action, d.nodes) for d in _diagnoses(fatal + nonfatal)] == [("nvlink", "evict", ("n005",))]


def test_segfault_counts_only_inside_nccl_or_cuda():
    # leptonai/gpud components/accelerator/nvidia/nccl/kmsg_matcher_test.go
    nccl = "[Thu Oct 10 03:06:53 2024] pt_main_thread[2536443]: segfault at 7f797fe00000 ip 00007f7c7ac69996 sp 00007f7c12fd7c30 error 4 in libnccl.so.2[7f7c7ac00000+d3d3000]"
    [d] = _diagnoses(_lines("n007", [nccl]))
    assert (d.fault, d.nodes) == ("nccl_error", ("n007",))
    other = nccl.replace("libnccl.so.2", "libfoo.so")  # the same crash in another library (synthetic)
    assert _diagnoses(_lines("n008", [other])) == []
