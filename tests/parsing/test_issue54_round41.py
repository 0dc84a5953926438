"""Issue 54, round 41 (fresh81, fresh82 and fresh83 opened, G24): the kernel's panic for want of memory in each shape
mm/oom_kill.c has printed it, and UCX's note that a process forked after opening a verbs device.

Every line is written for the test (other hosts, stamps, processes and numbers than the corpus rows), beside the
healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from faultlens.diagnosis.rules.host import KernelRule
from faultlens.events.envelope import Envelope
from tests.parsing.line_events import events, verdicts


@pytest.mark.parametrize(
    "line",
    [
        "[ 2210.417003] Kernel panic - not syncing: Out of memory and no killable processes...",
        "Kernel panic - not syncing: Out of memory: compulsory panic_on_oom is enabled",
        "gpu-node12 kernel: [88120.551902] Kernel panic - not syncing: Out of memory: system-wide panic_on_oom is enabled",
        "<0>[  951.220114] Kernel panic - not syncing: out of memory. panic_on_oom is selected",
        "[ 4410.009811] Kernel panic - not syncing: System is deadlocked on memory",
    ],
)
def test_a_panic_for_want_of_memory_is_host_oom_and_takes_the_machine_down(line: str) -> None:
    (event,) = events(line, "kernel")
    assert (event.kind, event.data["fault"], event.data["action"]) == ("panic", "host_oom", "evict")


@pytest.mark.parametrize(
    "line",
    [
        "[  612.330071] Kernel panic - not syncing: Fatal exception in interrupt",
        "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(8,3)",
        "[ 8812.101553] Kernel panic - not syncing: Fatal exception",
        "[ 7021.551880] Kernel panic - not syncing: Hard LOCKUP",
    ],
)
def test_a_panic_for_other_reasons_stays_kernel(line: str) -> None:
    assert verdicts(line, "kernel") == [("kernel", "evict")]


@pytest.mark.parametrize(
    "line",
    [
        "[ 2210.416950] Out of memory and no killable processes...",
        "[ 3301.118200] Out of memory: Killed process 88121 (python3) total-vm:91234560kB, anon-rss:80112340kB",
    ],
)
def test_the_oom_killers_own_lines_do_not_evict(line: str) -> None:
    assert all(f == "host_oom" and a != "evict" for f, a in verdicts(line, "kernel"))


def test_the_diagnosis_keeps_host_oom_for_a_panic_for_want_of_memory() -> None:
    rule = KernelRule()
    (oom,) = events("[ 2210.417003] Kernel panic - not syncing: Out of memory and no killable processes...", "kernel")
    (other,) = events("[  612.330071] Kernel panic - not syncing: Fatal exception in interrupt", "kernel")
    findings = [
        rule.observe(Envelope(ts=1_733_000_000.0, node="n7", job="j1", source="kernel", kind=e.kind, data=e.data))[0]
        for e in (oom, other)
    ]
    assert [(f.fault, f.action) for f in findings] == [("host_oom", "evict"), ("kernel", "evict")]


@pytest.mark.parametrize(
    "line",
    [
        "[1698221044.771203] [dgx-a07:40122:0]          ib_md.c:1234 UCX  WARN  IB: ibv_fork_init() was disabled or failed, yet a fork() has been issued.",
        "[1698221044.771210] [dgx-a07:40122:0]          ib_md.c:1235 UCX  WARN  IB: data corruption might occur when using registered memory.",
        "[1591002210.004411] [cn0412:7781:0]          ib_md.c:950  UCX  WARN  ibv_fork_init() was not successful, yet a fork() has been issued.",
    ],
)
def test_ucxs_note_of_a_fork_after_verbs_is_quiet(line: str) -> None:
    assert [(f, a) for f, a in verdicts(line, "nccl") if a not in ("none", None)] == []


@pytest.mark.parametrize(
    "line",
    [
        "[1698221050.120044] [dgx-a07:40122:0]          ib_md.c:489  UCX  ERROR ibv_reg_mr(address=0x7f11c0000000, length=8388608, access=0xf) failed: Bad address",
        "[1698221050.120051] [dgx-a07:40122:0]    ib_mlx5_log.c:177  UCX  ERROR Transport retry count exceeded on mlx5_2:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)",
    ],
)
def test_ucxs_errors_beside_the_fork_note_still_act(line: str) -> None:
    assert [a for _, a in verdicts(line, "nccl") if a not in ("none", None)] != []
