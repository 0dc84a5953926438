"""The storage vocabulary (parsing.storage_state): lines written here in each form a storage system states
its health in (a status table's row, a state field, a count of things in a bad state, one named thing in a
state, a controller's fault state, a block request's errno), each next to the healthy look-alike its guard
is for."""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from faultlens.parsing.state_grammar import read_state
from faultlens.parsing.storage_state import read_storage

# (fault line, its healthy look-alike): the look-alike is in the same form, so the guard is what tells them apart.
PAIRS = [
    # a status table's row: a state, or error counters
    ("\t    disk7     FAULTED      3     1     0  too many errors", "\t    disk7     ONLINE       0     0     0"),
    ("\tbackup9     UNAVAIL      0     0     0  insufficient replicas", "\tbackup9     AVAIL"),
    ("\t  raidz2-1  DEGRADED     0     0     0", "\t  raidz2-1  ONLINE       0     0     0"),
    ("\t    disk7     ONLINE       0     0    12", "\t    disk7     ONLINE       0     0     0"),
    ("\t    disk8     REMOVED      0     0     0", "\t    disk8     OFFLINE      0     0     0"),
    # a state field: the pool's own line, zed's field; mdadm's array state and its member table
    (" state: DEGRADED", " state: ONLINE"),
    ("zed: eid=41 class=statechange pool=scratch vdev_state=FAULTED", "zed: eid=41 class=statechange pool=scratch vdev_state=ONLINE"),
    ("             State : clean, degraded, recovering", "             State : clean, checking"),
    ("       2       8       49        -      faulty   /dev/sdd1", "       2       8       49        2      active sync   /dev/sdd1"),
    ("       -       0        0        1      removed", "       3       8       65        -      spare   /dev/sde1"),
    ("   Failed Devices : 2", "   Failed Devices : 0"),
    ("      976630336 blocks super 1.2 [3/2] [U_U]", "      976630336 blocks super 1.2 [3/3] [UUU]"),
    ("md5 : active raid1 sdf1[1](F) sde1[0]", "md5 : active raid1 sdf1[1] sde1[0]"),
    # a count of things in a bad state (none is no fault; objects misplaced by a rebalance are not degraded)
    ("    Reduced data availability: 12 pgs inactive, 3 pgs stale", "    Reduced data availability: 0 pgs inactive"),
    ("    Degraded data redundancy: 310/9000 objects degraded (3.444%), 7 pgs undersized", "    310/9000 objects misplaced (3.444%)"),
    ("    2 osds down", "    osd: 9 osds: 9 up (since 3h), 9 in (since 2d)"),
    ("    1 host (4 osds) down", "    4 hosts, 16 osds"),
    ("[WRN] SLOW_OPS: 17 slow ops, oldest one blocked for 611 sec, daemons [osd.5] have slow ops.", "0 slow ops"),
    ("3 requests are blocked > 32 sec", "slow request threshold is 30 sec"),
    ("    2 MDSs report slow metadata IOs", "    mds: 1/1 daemons up, 1 standby"),
    ("errors: 4 data errors, use '-v' for a list", "errors: No known data errors"),
    ("    Possible data damage: 5 scrub errors", "  scan: scrub repaired 0B in 00:10:02 with 0 errors on Sun Mar  1 00:34:03 2026"),
    ("             9   undersized+degraded+peered", "             40  active+clean"),
    ("    pgs:     25.000% pgs not active", "    pgs:     0.000% pgs not active"),
    # one named placement group or OSD
    ("    pg 7.1c is stuck inactive for 812.5, current state unknown, last acting []", "    pg 7.1c is active+clean+scrubbing+deep"),
    ("osd.14 marked down after no beacon for 900 seconds", "osd.14 boot"),
    ("libceph: osd6 down", "libceph: osd6 up"),
    # a storage controller's firmware in its fault state
    ("megaraid_sas 0000:5e:00.0: FW in FAULT state Fault code:0x20000", "megaraid_sas 0000:5e:00.0: FW now in Ready state"),
    # a block device's request ended by an errno that is the device's
    ("rbd: rbd4: write at objno 9 0~4096 result -5", "rbd: rbd4: capacity 10737418240 features 0x3d"),
    ("XFS (dm-3): xfs_do_force_shutdown(0x2) called, error -117", "mmc2: error -110 whilst initialising SDIO card"),
    ("OSError: [Errno 5] Input/output error: '/lustre/scratch/shard-00017.tar'", "err: Input/output error (5) on the event queue"),
    # a device given up on, a pool's I/O stopped, a path map with none left, devices a status says are faulted
    ("ata4.00: disabled", "ata4.00: NCQ disabled due to excessive errors, retrying"),
    ("errors: List of errors unavailable: pool I/O is currently suspended", "pool I/O resumed"),
    ("multipathd: mpathc: remaining active paths: 0", "multipathd: mpathc: remaining active paths: 2"),
    ("status: One or more devices are faulted in response to persistent errors.", "status: Some supported features are not enabled on the pool."),
    # error counters above zero; a monitor's verdict, a full OSD, mount(8)'s failure status
    ("BTRFS error (device nvme2n1): bdev /dev/nvme2n1 errs: wr 0, rd 14, flush 0, corrupt 0, gen 0",
     "BTRFS info (device nvme2n1): bdev /dev/nvme2n1 errs: wr 0, rd 0, flush 0, corrupt 0, gen 0"),
    ("Media and Data Integrity Errors:    7", "Media and Data Integrity Errors:    0"),
    ("Critical Warning:                   0x04", "Critical Warning:                   0x00"),
    ("197 Current_Pending_Sector  0x0012   100   100   000    Old_age   Always       -       24",
     "197 Current_Pending_Sector  0x0012   100   100   000    Old_age   Always       -       0"),
    ("zio pool=scratch vdev=/dev/sdh1 error=5 type=1 offset=270336 size=8192 flags=b0801", "zio pool=scratch vdev=/dev/sdh1 type=1 offset=270336"),
    ("ZFS has marked the device as faulted.", "ZFS has finished a resilver: eid=55 pool=scratch"),
    ("    1 full osd(s)", "    2 nearfull osd(s)"),
    ("MountVolume.SetUp failed for volume \"data\" : mount failed: exit status 32", "MountVolume.SetUp succeeded for volume \"data\""),
]  # fmt: skip


@pytest.mark.parametrize(("fault", "healthy"), PAIRS)
def test_reads_the_fault_and_not_its_look_alike(fault: str, healthy: str) -> None:
    got = read_state(fault, fault, "nccl")
    assert got is not None and (got.fault, got.rule) == ("storage", "storage_state"), fault
    assert read_state(healthy, healthy, "nccl") is None, healthy


@pytest.mark.parametrize("line", [
    "2026-03-01 mon.a (mon.0) : cluster [INF] Health check cleared: PG_DEGRADED (was: Degraded data redundancy: 5 pgs degraded)",
    "if a vdev is FAULTED, replace the disk",  # documentation: a row's form it is not
    "     State: degraded",  # systemctl status: the system's units, not an array
    "  JobId=77 state: SUSPENDED reason=preempted",  # a scheduler's job, not a pool's whole line
    "  1234  SUSPENDED  gpu  alice  2:03:11",  # a scheduler's table row: no zpool counters
    "HEALTH_WARN clock skew detected on mon.b",  # a warning whose reason is no storage state
    "    1234 slow requests served by the cache",  # slow requests of no storage daemon
    "[   33.1] xpad 1-5:1.0: xpad_try_sending_next_out_packet - usb_submit_urb failed with result -19",
    "nvme nvme3: Reconnecting in 10 seconds...",  # a retry (parsing.severity.says_retrying)
])  # fmt: skip
def test_healthy_look_alikes_of_no_pair(line: str) -> None:
    assert read_state(line, line, "nccl") is None
    assert read_state(line, line, "kernel") is None


def test_an_osd_without_the_dot_is_read_only_on_libcephs_line() -> None:
    # Ceph names its daemons "osd.N"; its kernel client prints "osdN": on another program's line the name is not Ceph's
    assert read_storage("[ 9866.1] libceph (0f3c-e12): osd4 down") == ("osd4", "down")
    assert read_storage("[ 9866.1] zzfs (0f3c): osd4 down") is None


def test_reading_the_same_line_twice_gives_the_same_answer() -> None:
    line = "HEALTH_WARN Reduced data availability: 2 pgs incomplete; 5 slow ops, oldest one blocked for 90 sec"
    assert read_storage(line) == read_storage(line) == ("pgs", "2 pgs incomplete")


@pytest.mark.parametrize("source", ["kernel", "nccl"])
def test_every_fault_line_passes_the_parsers_pre_filters(source: str) -> None:
    # the pre-filters carry the vocabulary's literals (parsing.storage_state.QUICK, less those an alarm word holds)
    prefilter = parser_for(source)._prefilter
    assert prefilter is not None
    for fault, _ in PAIRS:
        assert prefilter.search(fault.lower()), fault


@pytest.mark.parametrize(("source", "line"), [
    ("nccl", "\t  nvme3n1   FAULTED      0     0     0"),
    ("nccl", "             9   undersized+degraded+peered"),
    ("kernel", "[ 5000.1] smartpqi 0000:5e:00.0: controller is in FAULT state"),
    ("kernel", "[ 5000.1] nbd3: write at offset 4096 result -108"),
    ("kernel", "[ 5000.1] libceph: osd6 down"),
])  # fmt: skip
def test_parsers_emit_a_storage_alert_never_more(source: str, line: str) -> None:
    events = parser_for(source).feed(line)
    assert [(e.kind, e.data["fault"], e.data["action"], e.data["basis"], e.data["rule"]) for e in events] == [
        ("suspect_line", "storage", "alert", "grammar", "storage_state")
    ]


def test_a_storage_reading_at_the_lines_own_info_level_is_a_record() -> None:
    events = parser_for("nccl").feed("I0301 10:00:00.000001  42 monitor.go:10] pool scratch: 3 pgs stale")
    assert [(e.data["fault"], e.data["action"]) for e in events] == [("storage", "none")]
