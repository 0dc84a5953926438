"""Issue 54 round 29: fresh51 and fresh52 mined. Three healthy lines fired and are quiet now by a property of
the line (a controller's capability stated at probe, a CPU topology probe); each miss is read by its program's
own format (docs/rules.md, round 29), and the same program's ordinary lines stay quiet.

The fault lines are another device, number, wording or prefix the same program prints (its source's format
string, cited), never the corpus row itself; the rows are in tests/fixtures/log_corpus/fresh51 and fresh52
(provenance there). The quiet lines are the same program's start-up, success or progress words.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting, classes, events

_ROUND29_FORMS = [
    # `ceph -s` / `ceph health detail` summaries (fresh52: rook/rook#9194, #11382, #6928, ceph/ceph-ansible#6994,
    # ceph/ceph#5125; src/mon/PGMap.cc and OSDMap.cc's health summaries), other counts, pools and daemons
    ("    Reduced data availability: 12 pgs inactive, 3 pgs down", "nccl", "storage"),
    ("[WRN] PG_AVAILABILITY: Reduced data availability: 1 pg stale", "nccl", "storage"),
    ("    3 slow ops, oldest one blocked for 61 sec, mon.a has slow ops", "nccl", "storage"),
    ("    2 osds down", "nccl", "storage"),
    ("    2 hosts (6 osds) down", "nccl", "storage"),
    ("    2 MDSs report slow requests", "nccl", "storage"),
    ("    pg 7.1f is incomplete, acting [3,5,1] (reducing pool data min_size from 3 may help)", "nccl", "storage"),
    ("12 ops are blocked > 32.768 sec on osd.14", "nccl", "storage"),
    ("3 osds have slow requests", "nccl", "storage"),
    ("    Degraded data redundancy: 12/3000 objects degraded (0.400%), 4 pgs degraded", "nccl", "storage"),
    ("recovery 77/2310 objects degraded (3.333%)", "nccl", "storage"),
    # zpool status (fresh51: openzfs/zfs#17110, #5907; cmd/zpool/zpool_main.c), another pool, vdev and counts
    (" state: FAULTED", "kernel", "storage"),
    ("\t  nvme0n1p3  UNAVAIL      3     1     0  cannot open", "kernel", "storage"),
    ("\t    sdb     REMOVED      0     0     0", "kernel", "storage"),
    ("errors: 14 data errors, use '-v' for a list", "kernel", "storage"),
    # ibstat's port fields (fresh51: leptonai/gpud#482; fresh52: linux-rdma/rdma-core#847; infiniband-diags ibstat.c)
    ("\t\tPhysical state: LinkErrorRecovery", "kernel", "nic"),
    ("    State: Down", "nccl", "nic"),
    # the MegaRAID reset (fresh51: TIGRLab/admin#311, eLvErDe/hwraid#136; megaraid_sas_base.c, _fusion.c)
    ("[ 8812.100001] megasas: [10]waiting for 37 commands to complete", "kernel", "storage"),
    (
        "megaraid_sas 0000:3b:00.0: FW in FAULT state Fault code:0x20000 subcode:0x0 func:megasas_reset_fusion",
        "kernel",
        "storage",
    ),
    # libata giving a device up (fresh51: dentproject/dentOS#308; libata-core.c ata_dev_disable), older and newer words
    ("[  301.220001] ata4.01: disabled", "kernel", "storage"),
    ("[  301.220001] ata4.00: disable device", "kernel", "storage"),
    # smartctl's error log header (fresh51: FastVPSEestiOu/storage-system-monitoring#10; ataprint.cpp)
    ("Error 12 occurred at disk power-on lifetime: 301 hours (12 days + 13 hours)", "kernel", "storage"),
    # mdadm --detail (fresh52: kiwix/operations#514; mdadm Detail.c), another state and member
    ("          State : clean, degraded, recovering", "nccl", "storage"),
    ("       1       8       17        1      faulty   /dev/sdb1", "nccl", "storage"),
    # multipathd refusing a path (fresh52: flatcar/Flatcar#349; multipathd/main.c ev_add_path), another wwid and disk
    ("Jan 02 03:04:05 host9 multipathd[812]: mpatha: failed in domap for addition of new path sdk", "nccl", "storage"),
    # mksquashfs' short write relayed by enroot (fresh52: NVIDIA/pyxis#53; squashfs-tools mksquashfs.c)
    ("FATAL ERROR: Failed to write to output filesystem", "nccl", "storage"),
    # flux overlay status' lost broker (fresh51: flux-framework/flux-core#6626; src/cmd/builtin/overlay.c)
    ("│  ├─ 17 node017: lost administrative shutdown", "nccl", "node_silent"),
    # the kernel's OOM kill quoted by a monitor (fresh52: kubernetes/node-problem-detector#766), the global form
    ('  "message": "Out of memory: Killed process 1234 (python) total-vm:9753508kB, anon-rss:8776kB",', "nccl", "host_oom"),
    # etcd's peer probe in a job's output and Gravity's drift check (fresh52: kubernetes/kubernetes#82067,
    # gravitational/gravity#2121), another peer and nodes
    (
        "2020-01-02 03:04:05.000001 W | rafthttp: the clock difference against peer 1a2b3c4d5e6f7081 is too high "
        '[1.5s > 1s] (prober "ROUND_TRIPPER_SNAPSHOT")',
        "nccl",
        "clock_skew",
    ),
    ("[×] time drift between 10.0.0.1 and 10.0.0.2 is higher than the allowed threshold of 300ms: 512.3ms", "nccl", "clock_skew"),
    # the device plugin and nvidia-container-cli on NVML (fresh52: volcano-sh/volcano#3160; fresh51: labdao/plex#18)
    ("I0101 00:00:01.000001       1 main.go:80] Failed to initialize NVML: could not load NVML library.", "nccl", "gpu_lost"),
    ("F0101 00:00:01.000002       1 main.go:45] failed to initialize NVML", "nccl", "gpu_lost"),
    ("stderr: nvidia-container-cli: initialization error: nvml error: driver/library version mismatch", "kernel", "gpu_lost"),
    # an IDE's exit status with the signal's own name (fresh52: pytorch/pytorch#5848): macOS numbers SIGBUS 10
    ("Process finished with exit code 138 (interrupted by signal 10: SIGBUS)", "nccl", "host_oom"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _ROUND29_FORMS)
def test_a_round29_form_in_another_shape_is_read(line: str, source: str, fault: str) -> None:
    assert fault in classes(line, source)


def test_the_kubelet_disk_reclaim_is_recorded_with_its_class_at_its_info_level() -> None:
    # fresh52: sustainable-computing-io/kepler#1799; the older glog wording of eviction_manager.go
    line = "I0301 10:00:00.000001    2211 eviction_manager.go:338] eviction manager: attempting to reclaim nodefs"
    assert classes(line, "nccl") == {"storage"}
    assert acting(line, "nccl") == []


_QUIET_BESIDE = [
    # hpsa's capability notices at probe (fresh51: im-0/hpsahba#44; hpsa.c), and another board's
    ("[  216.487929] hpsa 0000:05:00.0: Logical aborts not supported", "kernel"),
    ("[  216.487935] hpsa 0000:05:00.0: HP SSD Smart Path aborts not supported", "kernel"),
    # a topology probe of sysfs' CPU description (fresh52: ROCm/hip#3806), another node and cache index
    ("Failed to open /sys/devices/system/node/node1/cpu12/cache/index2/shared_cpu_map", "nccl"),
    # Ceph's advisories and its OSDs all up
    ("    12 pgs not deep-scrubbed in time", "nccl"),
    ("    too few PGs per OSD (8 < min 30)", "nccl"),
    ("    osd: 3 osds: 3 up (since 2h), 3 in (since 2h)", "nccl"),
    # the monitor clearing the check it quotes (fresh15's row's form), another count
    (
        "2020-01-02 03:04:05.000001 mon.a mon.0 10.0.0.1:6789/0 12 : cluster [INF] Health check cleared: PG_AVAILABILITY "
        "(was: Reduced data availability: 2 pgs inactive)",
        "kernel",
    ),
    ("cluster [INF] Health check cleared: PG_DEGRADED (was: Degraded data redundancy: 3/90 objects degraded (3.333%))", "nccl"),
    # zpool's healthy pool
    (" state: ONLINE", "kernel"),
    ("\t  sda       ONLINE       0     0     0", "kernel"),
    ("errors: No known data errors", "kernel"),
    # ibstat's active port
    ("\t\tState: Active", "kernel"),
    ("\t\tPhysical state: LinkUp", "kernel"),
    # the MegaRAID reset that recovered, libata's link up
    ("megasas: reset successful", "kernel"),
    ("[    2.100001] ata1: SATA link up 6.0 Gbps (SStatus 133 SControl 300)", "kernel"),
    # mdadm's clean array and an active member
    ("          State : clean", "nccl"),
    ("       0       8        1        0      active sync   /dev/sda1", "nccl"),
    # the kubelet's eviction observations
    (
        "I1215 19:22:59.485565   77158 helpers.go:814] eviction manager: observations after resource reclaim: "
        "signal=nodefs.inodesFree, available: 104781035, capacity: 104857600",
        "nccl",
    ),
    # flux overlay status' healthy rows
    ("├─ 820 elcap1124: full", "nccl"),
    # Gravity's drift measured within the threshold
    ("DEBU Time drift between 10.0.0.1 and 10.0.0.2: 12ms.", "nccl"),
]


@pytest.mark.parametrize(("line", "source"), _QUIET_BESIDE)
def test_a_healthy_line_beside_a_round29_form_is_quiet(line: str, source: str) -> None:
    assert acting(line, source) == []


def test_hpsa_s_own_fault_beside_its_capability_notice_still_acts() -> None:
    # an abort that happened and failed, in the driver's error-handler words, still reads: only the capability
    # sentence ("aborts not supported") is neutral
    line = "[ 5021.118211] hpsa 0000:03:00.0: scsi 0:0:0:0: Aborting command failed"
    assert any(e.data.get("fault") == "storage" for e in events(line, "kernel"))
    assert acting(line, "kernel")
