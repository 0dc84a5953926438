"""Issue 54 round 27: what fired on the ordinary lines of whole real logs (tests/fixtures/whole_logs,
bench/results_whole_logs.md), each quieted by a property of the line, beside the same program's or rule's
fault line that still acts (docs/rules.md, round 27).

The quiet lines are the whole logs' own, as the parser reads them (a dataset's added columns taken off as
the manifest's ``strip`` does). The fault lines are corpus rows (tests/fixtures/log_corpus, provenance
there), rules' examples or public files from the search index (its id in the comment).
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting, classes

_QUIET = [
    # BGL's RAS log: its severity column (FATAL) before the machine-check register's fields padded with dots to
    # their values (bgl_ras lines 207 and 261; the dataset marks both non-alert). They evicted.
    (
        "1118767283 2005.06.14 R20-M1-N3-C:J14-U01 2005-06-14-09.41.23.815131 R20-M1-N3-C:J14-U01 RAS KERNEL FATAL "
        "machine check: i-fetch......................0",
        "kernel",
    ),
    (
        "1118771085 2005.06.14 R27-M1-ND-C:J09-U01 2005-06-14-10.44.45.851799 R27-M1-ND-C:J09-U01 RAS KERNEL FATAL "
        "machine check enable..............0",
        "kernel",
    ),
    # a floating-point register's value alone, the same dump's (bgl_ras line 1990): the model read kernel
    (
        "1135579635 2005.12.25 R62-M1-NA-C:J04-U01 2005-12-25-22.47.15.963417 R62-M1-NA-C:J04-U01 RAS KERNEL FATAL "
        "fpr29=0xffffffff ffffffff ffffffff ffffffff",
        "kernel",
    ),
    # login programs' connection words (linux_syslog line 553, thunderbird line 75): the model read storage
    (
        "Jun 30 20:53:04 combo klogind[19274]: Authentication failed from 163.27.187.39 (163.27.187.39): "
        "Software caused connection abort ",
        "kernel",
    ),
    ("Nov 9 12:01:19 #8#/#8# sshd[19023]: connection lost: 'Connection closed.'", "kernel"),
    # ntpd's routine step, under a second (thunderbird line 460; index id 57141463775)
    ("Nov 9 12:04:25 local@tbird-admin1 ntpd[1815]: time reset +0.182379 s", "kernel"),
    ("Jun 28 22:28:01 mb9fe ntpd[5367]: time reset +0.225678 s", "kernel"),
    # the kubelet's start-up state before its first relist, 4 s after its first line (kubelet line 897)
    (
        "E0120 11:42:15.400230    4787 kubelet.go:1765] skipping pod synchronization - [container runtime status check "
        "may not have completed yet, PLEG is not healthy: pleg has yet to be successful]",
        "nccl",
    ),
]


@pytest.mark.parametrize(("line", "source"), _QUIET)
def test_an_ordinary_line_of_a_whole_log_is_quiet(line: str, source: str) -> None:
    assert acting(line, source) == []


def test_a_switchs_temperature_is_no_gpus() -> None:
    # LANL's node-event log, a gige switch's sensor (hpc_node_events line 722, labelled `other`: an alert of no
    # class of ours): the model read gpu_thermal, naming no GPU
    assert "gpu_thermal" not in classes("2561239 gige4 gige temperature 1073375350 1 critical")


_STILL_ACTS = [
    # a machine check as a platform's error log and the kernel's panic say it (a rule's example; index id 32556093930)
    (
        "LOG: Uncorrectable Machine Check Exception (Board 0, Processor 1, APIC ID 0x00000010, Bank 0x00000005, "
        "Status 0xBA000000'00400405, Address 0x00000000'00000000, Misc 0x00000000'00004280)",
        "kernel",
        "kernel",
    ),
    ("[  144.156140] Kernel panic - not syncing: Fatal machine check", "kernel", "kernel"),
    # ntpd stepping the clock by seconds (index ids 56742521052, an Ubuntu forum thread; 56864158537)
    ("Oct  6 19:51:23 TPHADOOP06 ntpd[17271]: time reset +99.339460 s", "kernel", "clock_skew"),
    ("Jan 28 21:35:27 AMD-UB804 ntpd[6617]: time reset +2.325616 s", "kernel", "clock_skew"),
    # the kubelet's PLEG gone stale, alone and quoted by the same 'Skipping pod synchronization' (corpus rows:
    # kubernetes/kubernetes#77728, aws-samples/eks-workshop-v2#447)
    ("PLEG is not healthy: pleg was last seen active 3m3.928932625s ago; threshold is 3m0s", "nccl", "node_silent"),
    (
        'Apr 13 10:53:52 ip-10-42-10-121 kubelet: E0413 10:53:52.844381    3263 kubelet.go:2055] "Skipping pod '
        'synchronization" err="PLEG is not healthy: pleg was last seen active 2h33m12.704970756s ago; threshold is 3m0s"',
        "nccl",
        "node_silent",
    ),
    # sshd's own process stuck in the kernel is still the kernel's (corpus row, imq/linuximq#8)
    ("[  520.451222] NMI watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [sshd:2645]", "kernel", "kernel"),
    # the model's guesses that name their class: a journal aborted on a disk, an oops (corpus rows), a GPU's
    # temperature (ValveSoftware/Proton#8028)
    ("[21628.545380] Aborting journal on device sdb1-8.", "kernel", "storage"),
    ("[135992.726639] Unable to handle kernel NULL pointer dereference at virtual address 0000000c", "kernel", "kernel"),
    (
        "Aug 27 01:11:45 arch kernel: amdgpu 0000:03:00.0: amdgpu: ERROR: GPU over temperature range(SW CTF) detected!",
        "kernel",
        "gpu_thermal",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_ACTS)
def test_the_same_programs_fault_still_acts(line: str, source: str, fault: str) -> None:
    assert fault in {e.data.get("fault") for e in acting(line, source)}
