"""Issue 54 round 32: fresh57 and fresh58 mined. No healthy line fired in either; each miss is read by its program's
own format or by widening a general mechanism (a realign header, a subsystem's phrase, a register's bit), and the same
program's ordinary lines stay quiet (docs/rules.md, round 32).

The fault lines are another host, device, number or prefix the same program prints (its source's format string,
cited), never the corpus row itself; the rows are in tests/fixtures/log_corpus/fresh57 and fresh58 (provenance there).
"""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from tests.parsing.line_events import acting, classes, events

_ROUND32_FORMS = [
    # Ceph's health detail with the skew in printf's %g exponent form (fresh57: public GitHub file, index id 70275282262)
    ("    mon.ceph-3 clock skew 1.23457e+06s > max 0.05s", "kernel", "clock_skew"),
    # the NVIDIA driver's channel recovery after Xid 79, its NVRM tag dropped by the journal (fresh57: index id 7167669783)
    (
        "Jan 12 03:14:15 gpu-7 kernel: krcRcAndNotifyAllChannels_IMPL: RC all channels for critical error 79.",
        "kernel",
        "gpu_lost",
    ),
    # the driver's attached-GPU check failing, its tag dropped the same way (fresh57: index id 7167669783; threadstate.c)
    ("Jan 12 03:14:16 gpu-7 kernel: _threadNodeCheckTimeout: API_GPU_ATTACHED_SANITY_CHECK failed!", "kernel", "gpu_lost"),
    # a hung task whose 15-character comm holds a space (fresh57: index id 39012003915; sched_show_task's task:%-15.15s)
    ("[ 8812.000131] task:pool-3 thread- state:D stack:0     pid:912   ppid:1      flags:0x00004002", "kernel", "kernel"),
    # systemd-oomd's kill and its candidates, and systemd's unit record of it, on the host's journal (fresh57: index id
    # 70830566028; src/oom/oomd-util.c, src/core/unit.c's numbered form)
    (
        "Mar 02 10:00:01 node-3 systemd-oomd[611]: Killed /system.slice/slurmstepd.scope/job_12 due to memory pressure for "
        "/system.slice being 71.20% > 60.00% for > 20s with reclaim activity",
        "kernel",
        "host_oom",
    ),
    ("Mar 02 10:00:01 node-3 systemd-oomd[611]: Considered 14 cgroups for killing, top candidates were:", "kernel", "host_oom"),
    (
        "Mar 02 10:00:01 node-3 systemd[1]: slurmstepd.scope: systemd-oomd killed 3 process(es) in this unit.",
        "kernel",
        "host_oom",
    ),
    # earlyoom's kill, its low-memory notice and its report under both default limits, on the host's journal
    # (fresh58: Comfy-Org/ComfyUI#15276; earlyoom main.c, kill.c)
    (
        'Mar 11 02:14:09 gpu-node-4 earlyoom[912]: sending SIGKILL to process 4411 uid 1001 "python": oom_score 901, '
        'VmRSS 60122 MiB, cmdline "python train.py"',
        "kernel",
        "host_oom",
    ),
    (
        "Mar 11 02:14:09 gpu-node-4 earlyoom[912]: low memory! at or below SIGKILL limits: mem  2.50%, swap  5.00%",
        "kernel",
        "host_oom",
    ),
    (
        "Mar 11 02:14:09 gpu-node-4 earlyoom[912]: mem avail:   212 of 64215 MiB ( 0.33%), swap free:    0 of    0 MiB ( 0.00%)",
        "kernel",
        "host_oom",
    ),
    # UCX's own failed device query (fresh58: openucx/ucx#5469; uct/ib/base/ib_device.c), another HCA and errno
    (
        "[1700000000.123456] [gpu-n12:4410:0]       ib_verbs.h:84   UCX  ERROR ibv_exp_query_device(mlx5_2) returned 95: "
        "Operation not supported",
        "nccl",
        "nic",
    ),
    # ip link of an interface brought up with no carrier (fresh58: coreos/bugs#412; iproute2 ip/ipaddress.c)
    (
        "3: enp65s0f1: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 9000 qdisc mq state DOWN mode DEFAULT group default qlen 1000",
        "kernel",
        "nic",
    ),
    # Go's signal line in a container runtime's log file (fresh58: volcano-sh/devices#58; CRI's 'stderr F' column)
    (
        "2025-01-02T03:04:05.000000001Z stderr F [signal SIGSEGV: segmentation violation code=0x2 addr=0x18 pc=0x4a1b2c]",
        "nccl",
        "user_code",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _ROUND32_FORMS)
def test_round32_fault_forms_act(line: str, source: str, fault: str) -> None:
    assert fault in {e.data.get("fault") for e in acting(line, source)}, classes(line, source)


# srun refusing a step's request and sbatch its memory options (fresh58: mehta-lab/recOrder#482; src/srun, opt.c): the
# request is the user's to fix, recorded as rule slurm.allocation_refused records Slurm's other refusals
_ROUND32_RECORDED = [
    "srun: error: Unable to create step for job 8812: Invalid generic resource (gres) specification",
    "sbatch: fatal: SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE are mutually exclusive.",
]


@pytest.mark.parametrize("line", _ROUND32_RECORDED)
def test_round32_refused_requests_are_the_users(line: str) -> None:
    assert "user_code" in classes(line, "nccl")


_QUIET = [
    # the same programs' ordinary lines
    ("Mar 02 10:00:01 node-3 systemd[1]: Started systemd-oomd.service - Userspace Out-Of-Memory (OOM) Killer.", "kernel"),
    (
        "Mar 11 02:00:00 gpu-node-4 earlyoom[912]: mem avail: 41234 of 64215 MiB (64.21%), swap free:    0 of    0 MiB ( 0.00%)",
        "kernel",
    ),
    ("mem avail: 21234 of 64215 MiB (33.07%), swap free: 4096 of 4096 MiB (100.00%)", "nccl"),
    ("3: enp65s0f1: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000", "kernel"),
    ("2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP group default qlen 1000", "nccl"),
    ("[ 8812.000131] task:sshd            state:S stack:0     pid:912   ppid:1      flags:0x00000002", "kernel"),
    ("2025-01-02T03:04:05.000000001Z stdout F I0102 03:04:05.000000       1 main.go:42] Starting device plugin", "nccl"),
    (
        "2024-09-16T10:20:00.000+0800 mon.ceph-1 [INF] Health check cleared: MON_CLOCK_SKEW (was: clock skew detected on mon.ceph-3)",
        "kernel",
    ),
]


@pytest.mark.parametrize(("line", "source"), _QUIET)
def test_round32_same_programs_ordinary_lines_stay_quiet(line: str, source: str) -> None:
    assert not acting(line, source), classes(line, source)


def test_a_step_refused_for_want_of_nodes_is_not_the_users() -> None:
    line = "srun: error: Unable to create step for job 8812: Requested nodes are busy"
    assert "user_code" not in classes(line, "nccl")


def test_channel_recovery_takes_its_xids_class() -> None:
    line = "NVRM: krcRcAndNotifyAllChannels_IMPL: RC all channels for critical error 13."
    assert {(e.data.get("fault"), e.data.get("xid")) for e in events(line)} == {("app_fault", 13)}


def test_channel_recovery_folds_into_the_xid_it_follows() -> None:
    p = parser_for("kernel")
    first = p.feed("[ 100.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1201, GPU has fallen off the bus.")
    again = p.feed("[ 100.000100] NVRM: krcRcAndNotifyAllChannels_IMPL: RC all channels for critical error 79.")
    assert [e.data.get("fault") for e in first] == ["gpu_lost"]
    assert again == []


@pytest.mark.parametrize(
    ("status", "corrected", "acts"),
    [("cc00050000010092", True, False), ("bc00000000010092", False, True)],  # bit 61 (UC) clear, then set
)
def test_an_edac_machine_check_reads_its_status_register(status: str, corrected: bool, acts: bool) -> None:
    # sb_edac's own print of the event it decodes (fresh58: public GitHub file, index id 9202170425), another CPU and bank
    line = f"[ 5120.771201] EDAC sbridge MC1: CPU 12: Machine Check Event: 0 Bank 9: {status}"
    found = events(line)
    assert [(e.kind, e.data.get("fault"), e.data.get("corrected")) for e in found] == [("mce", "kernel", corrected)]
    assert bool(acting(line)) is acts
