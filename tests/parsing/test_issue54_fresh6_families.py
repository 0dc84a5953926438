"""Issue 54, round 7: the families fresh batch 6 showed missing or crying wolf, and the families every
unseen batch missed (network and parallel file systems, RDMA transports, clock daemons, non-NVIDIA GPUs),
each by the format and level the software prints, beside the healthy look-alikes of the same family
that must stay quiet. Lines are stamped past BOOT_UPTIME_S or carry no clock."""

from __future__ import annotations

import pytest

from faultlens.parsing.timestamps import split_timestamp
from tests.parsing.test_issue54_fresh1_families import acting, kernel, trainer


def faults(events):
    return {e.data["fault"] for e in acting(events)}


# ---- the line's prefix: what is taken off before the driver's tag is read -------------------------
@pytest.mark.parametrize(("line", "mono", "message"), [
    # a syslog line whose host a reporter or a relay dropped: the tag alone goes too
    ("Feb  2 08:03:20 kernel: [37937.168911] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!", 37937.168911,
     "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!"),
    ("Feb  2 08:03:20 node7 kernel: [37937.168911] nvme nvme0: I/O 1 QID 2 timeout, aborting", 37937.168911,
     "nvme nvme0: I/O 1 QID 2 timeout, aborting"),
    # a capital word after the clock is the message's own, not a program's tag
    ("Nov 22 10:11:12 WARNING: CPU: 0 PID: 1 at drivers/nvme/host/core.c:100 nvme_x+0x1/0x2", None,
     "WARNING: CPU: 0 PID: 1 at drivers/nvme/host/core.c:100 nvme_x+0x1/0x2"),
    ("2024-01-01T10:00:00Z INFO: task python:12 blocked for more than 120 seconds.", None,
     "INFO: task python:12 blocked for more than 120 seconds."),
    # dmesg --reltime / -H: a delta (either decimal mark) is no clock; a minute's first line is a wall clock
    ("[  +0,317065] usb 1-6: device descriptor read/64, error -71", None, "usb 1-6: device descriptor read/64, error -71"),
    ("[ +12.000002] BTRFS critical (device sda1): corrupt leaf", None, "BTRFS critical (device sda1): corrupt leaf"),
    ("[<    0.000123>] nvme nvme0: controller is down", None, "nvme nvme0: controller is down"),
    ("[Sep11 18:40] INFO: task btrfs:1357 blocked for more than 120 seconds.", None,
     "INFO: task btrfs:1357 blocked for more than 120 seconds."),
])  # fmt: skip
def test_the_prefix_is_taken_off(line, mono, message):
    stamped = split_timestamp(line, now=1.8e9)
    assert (stamped.mono, stamped.message) == (mono, message)


def test_a_reltime_minute_is_a_wall_clock():
    assert split_timestamp("[Feb 2 08:03] amdgpu: x", now=1.8e9).ts is not None


# ---- family members that get their class ----------------------------------------------------------
@pytest.mark.parametrize(("line", "fault", "parse"), [
    # a GPU's lines behind a host-less syslog prefix are read by the GPU's driver tag
    ("Feb  2 08:03:20 kernel: [37937.786506] [drm:gfx_v10_0_cp_gfx_enable.isra.0 [amdgpu]] *ERROR* failed to halt cp gfx",
     "gpu_reset_required", kernel),
    ("Mar  4 10:00:00 kernel: [ 9999.1] amdgpu 0000:c1:00.0: amdgpu: MES failed to respond to msg=REMOVE_QUEUE",
     "gpu_reset_required", kernel),
    # a USB NIC's transfer failing with an errno, its carrier dropping (the same as "NIC Link is Down")
    ("[ 9234.285636] r8152 2-1.1:1.0 eth1: Tx status -71", "nic", kernel),
    ("[ 9234.285636] ax88179_178a 4-2:1.0 enx001122334455: Rx status -32", "nic", kernel),
    ("[ 9198.372498] r8152 2-1.1:1.0 eth1: carrier off", "nic", kernel),
    # Ceph: a daemon's -1 line that says what failed; the monitor's health checks that block I/O
    ("2017-02-08 06:11:15.324892 7f39862b6700 -1 osd.2 9 heartbeat_check: no reply from 10.0.0.2:6803 osd.3", "storage", kernel),
    ("2024-02-18T01:34:05.455+0000 7fe97516a640 -1 mon.a@0(leader) e2 get_health_metrics reporting 4 slow ops", "storage", kernel),
    ("2020-01-01 00:00:00.000000 7f00aaaabbbb -1 bluestore(/var/lib/ceph/osd/ceph-1) _open_db erroring opening db: (5) Input/output error",
     "storage", kernel),
    ("2019-01-01 00:00:00.0 7f97 0 log_channel(cluster) log [WRN] : Health check failed: 2 osds down (OSD_DOWN)", "storage", kernel),
    ("cluster 2020-11-03T12:46:58.519597+0200 mon.a (mon.0) 9 : cluster [WRN] Health check update: Reduced data availability: "
     "3 pgs inactive (PG_AVAILABILITY)", "storage", kernel),
    ("cluster 2020-11-03T12:46:58.519597+0200 mon.a (mon.0) 9 : cluster [ERR] Health check failed: 1 scrub errors (OSD_SCRUB_ERRORS)",
     "storage", kernel),
    # CIFS's server that stopped answering; GPFS's log at its error, critical and alert tags
    ("[ 9345.678901] CIFS: VFS: \\\\server\\share has not responded in 180 seconds. Reconnecting...", "storage", kernel),
    ("2023-05-01_10:00:00.123+0200: [E] Node 10.0.0.5 (node5) is being expelled because of an expired lease.", "storage", kernel),
    ("Mon Jun 25 22:23:36.298 2018: [X] File System gpfs1 unmounted by the system with return code 5 reason code 0", "storage", kernel),
    ("2023-05-01_10:00:00.123+0200: [E:46] Unable to mount file system gpfs1", "storage", kernel),
    # the storage daemons: smartd's lost sectors and failed checks, iscsid relaying a connection error
    ("Mar  3 10:00:00 node7 smartd[900]: Device: /dev/sda [SAT], 8 Currently unreadable (pending) sectors", "storage", kernel),
    ("Mar  3 10:00:00 node7 smartd[900]: Device: /dev/sdb [SAT], FAILED SMART self-check. BACK UP DATA NOW!", "storage", kernel),
    ("Mar  3 10:00:00 node7 smartd[900]: Device: /dev/sdc, 3 Offline uncorrectable sectors", "storage", kernel),
    ("Mar  3 10:00:00 node7 iscsid[900]: Kernel reported iSCSI connection 1:0 error (1022 - ISCSI_ERR_NOP_TIMEDOUT: A NOP has timed out) state (3)",
     "storage", kernel),
    # a line whose tag is a device the table does not name as a driver: its class from the device
    ("Mar  3 10:00:00 node7 multipathd[900]: sdb: checker failed path 8:16 in map mpatha", "storage", kernel),
    ("[ 9000.100000] eth3: failed to allocate rx ring", "nic", kernel),
    # BeeGFS's own log at its error or critical level (its line states the level first)
    ("(1) Jun10 11:40:30 Worker1 [Messaging (RPC)] >> Communication error: Receive timed out from: beegfs-storage node1", "storage", kernel),
    ("(0) 11:40:30 Main [App] >> Unable to open storage target", "storage", kernel),
    # each NTP daemon stepping the clock by a second or more, in its own words
    ("set local clock to Thu Mar 12 03:09:57 CDT 2015 (offset -3614.076439s)", "clock_skew", kernel),
    ("Mar  3 10:00:00 node7 ntpd[12]: ntpd: time set +2.149650 s", "clock_skew", kernel),
    ("Mar  3 10:00:00 node7 ntpd[12]: ntpd: time slew -1.500000 s", "clock_skew", kernel),
    ("Mar  3 10:00:00 node7 chronyd[812]: System clock was stepped by 37.012345 seconds", "clock_skew", kernel),
    # UCX's own ERROR / FATAL level when the transport lost its peer (the collective's, as NCCL's is)
    ("[1506867524.064665] [n12:26727:0]     ucp_worker.c:373  UCX  ERROR Error Endpoint timeout was not handled for ep 0xac1510",
     "nccl_error", trainer),
    ("[n01:13210:0:13210]    ud_iface.c:732  UCX Fatal: transport error: Endpoint timeout", "nccl_error", trainer),
    ("[n15:39570:0:39570]       ud_ep.c:248  Fatal: UD endpoint 0x3b9a060: unhandled timeout error", "nccl_error", trainer),
    ("[1653901933.475958] [gpu02:5215 :0]   sock.c:325  UCX  ERROR   connect(fd=40, dest_addr=10.0.0.1:40703) failed: Connection refused",
     "nccl_error", trainer),
    ("[1467152048.497975] [n3:3087 :0] rc_verbs_iface.c:47   UCX  ERROR Send completion with error: transport retry counter exceeded",
     "nccl_error", trainer),
    # a network plugin's WARN that names a failure stays the collective's
    ("h:1:2 [0] net_fastsocket.cc:700 NCCL WARN Connect to 10.0.0.1<1234> failed : Connection refused", "nccl_error", trainer),
    ("h:1:2 [0] nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI Wrong number of NICs for device 3. Expected 4 but got 2",
     "nccl_error", trainer),
    ("h:1:2 [0] p2p_plugin.c:141 NCCL WARN NET/IB : Got async event : port error", "nic", trainer),
    # the kernel's hwpoison handler: a page of the host's memory failed (mm/memory-failure.c)
    ("[ 9261.273240] Memory failure: 0x12345: Sending SIGBUS to python3:1234 due to hardware memory corruption", "kernel", kernel),
    ("[ 9261.273240] Memory failure: 0x12345: recovery action for huge page: Failed", "kernel", kernel),
    # a signal as the HPC runtimes' handlers and launchers print it
    ("[n1:1234:0:1234] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)", "user_code", trainer),
    ("[n1:01234] Signal: Bus error (7)", "host_oom", trainer),
    ("mpirun noticed that process rank 3 with PID 1234 on node n1 exited on signal 11 (Segmentation fault).", "user_code", trainer),
    # a program that finds no NVIDIA driver to talk to, in each tool's words
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
     "gpu_lost", trainer),
    ("Failed to initialize NVML: Driver/library version mismatch", "gpu_lost", trainer),
    ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver", "gpu_lost", trainer),
    # ROCm's HIP runtime read as CUDA's: its error names and texts
    ("RuntimeError: HIP error: an illegal memory access was encountered", "cuda_error", trainer),
    ("hipErrorNoDevice: no ROCm-capable device is detected", "gpu_lost", trainer),
    # (round 24, docs/design.md §9) a kernel not compiled for the device's architecture: the build's, on every machine alike
    ("RuntimeError: HIP error: invalid device function", "user_code", trainer),
    # c10d's store raising: the ranks could not meet (the job's communication set-up)
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.", "nccl_error", trainer),
    # the device allocator's OOM in any torch backend's words is the program's, as CUDA's is
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 63.98 GiB", "user_code", trainer),
    ("RuntimeError: XPU out of memory. Tried to allocate 20.00 MiB", "user_code", trainer),
])  # fmt: skip
def test_a_family_member_gets_its_class(line, fault, parse):
    assert faults(parse(line)) == {fault}


# ---- healthy look-alikes of the same families -----------------------------------------------------
@pytest.mark.parametrize(("line", "parse"), [
    ("[ 9198.372498] r8152 2-1.1:1.0 eth1: carrier on", kernel),
    ("[   12.372498] r8152 2-1.1:1.0 eth1: carrier off", kernel),  # at boot
    ("[  +0,317065] usb 1-6: device descriptor read/64, error -71", kernel),  # USB is outside the job
    ("[ 9198.372498] usb 1-1: reset high-speed USB device number 2 using xhci_hcd", kernel),
    # Ceph's derr start-up notes and the checks that name a setting or a risk, not blocked I/O (PG_DEGRADED, the
    # redundancy lost, reads storage since round 30: tests/parsing/test_issue54_round30.py)
    ("2017-02-08 06:10:41.321127 7f398f6b6a40 -1 osd.2 0 log_to_monitors {default=true}", kernel),
    ("debug 2026-02-18T12:47:22.154+0000 7ff4e8c85640 -1 osd.0 0 waiting for initial osdmap", kernel),
    ("2020-01-01 00:00:00.000000 7f00aaaabbbb -1 mds.0 log_to_monitors {default=true}", kernel),
    ("cluster 2020-11-03T12:46:58.519597+0200 mon.a (mon.0) 9 : cluster [WRN] Health check failed: noout flag(s) set (OSDMAP_FLAGS)", kernel),
    ("cluster 2020-11-03T12:46:58.519597+0200 mon.a (mon.0) 9 : cluster [INF] Health check cleared: SLOW_OPS (was: 3 slow ops)", kernel),
    ("[ 9000.100000] sdb: detected capacity change from 0 to 1000", kernel),
    # smartd's ordinary lines; iscsid's recovery
    ("Mar  3 10:00:00 node7 smartd[900]: Device: /dev/sda [SAT], SMART Usage Attribute: 194 Temperature_Celsius changed from 36 to 37", kernel),
    ("Mar  3 10:00:00 node7 smartd[900]: Device: /dev/sda [SAT], is SMART capable. Adding to \"monitor\" list.", kernel),
    ("Mar  3 10:00:00 node7 iscsid[900]: connection1:0 is operational after recovery (1 attempts)", kernel),
    # BeeGFS below its error level
    ("(3) Jun10 11:40:30 Main [App] >> Version: 7.2", kernel),
    ("(2) Jun10 11:40:30 XNodeSync [Node registration] >> Node is not reachable", kernel),
    # GPFS below its error tag
    ("2023-05-01_10:00:00.123+0200: [N] Connecting to 10.0.0.5 node5 <c0n3>", kernel),
    ("2023-05-01_10:00:00.123+0200: [I] Command: successful mount gpfs1", kernel),
    ("2023-05-01_10:00:00.123+0200: [W] Disk lease period expired 5.1 seconds ago", kernel),
    # clock daemons under a second, and their ordinary lines
    ("set local clock to Thu Mar 12 03:09:57 CDT 2015 (offset 0.076439s)", kernel),
    ("Mar  3 10:00:00 node7 ntpd[12]: ntpd: time set -0.149650 s", kernel),
    ("Jul 17 04:19:40 intranet chronyd[17789]: System clock was stepped by 0.000012 seconds", kernel),
    ("Mar  3 10:00:00 node7 systemd-timesyncd[700]: Initial synchronization to time server 10.0.0.1:123 (ntp.example.org).", kernel),
    # amdgpu's RAS counting corrected errors; its resets that succeeded
    ("[ 9345.678901] amdgpu 0000:c1:00.0: amdgpu: 2 correctable hardware errors detected in umc block", kernel),
    ("[ 9345.678901] amdgpu 0000:c1:00.0: amdgpu: GPU reset(2) succeeded!", kernel),
    # UCX below ERROR, and its ERRORs that are a set-up's, not a lost peer's
    ("[1700000000.123456] [n1:1234:0]  parser.c:1918 UCX  WARN  unused env variable: UCX_NET_DEVICES (set UCX_WARN_UNUSED_ENV_VARS=n to suppress this)",
     trainer),
    ("[1700000000.123456] [n1:1234:0]  ucp_worker.c:1855 UCX  INFO    0x100b240 inter-node cfg#3 tag(rc_mlx5/mlx5_0:1)", trainer),
    ("[ 9261.273240] Memory failure: 0x12345: recovery action for dirty LRU page: Recovered", kernel),
    # a rule's words on a line of a subsystem the job does not run on: Bluetooth's controller is no NIC
    ("[ 9000.100000] Bluetooth: hci0: command 0xfc05 tx timeout", kernel),
    # torchelastic's failure summary header: the worker's own lines say why
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", trainer),
    # a signal a person, the scheduler or the launcher sends
    ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 1234 got signal: 15", trainer),
    ("mpirun noticed that process rank 3 with PID 1234 on node n1 exited on signal 15 (Terminated).", trainer),
    # a network plugin's diagnostics that name no failure
    ("full-debug2-test-1:4024:4048 [0] net_fastsocket.cc:765 NCCL WARN Cannot get incoming CPU.", trainer),
    ("full-debug2-test-0:4300:4325 [0] net_fastsocket.cc:785 NCCL WARN Maximum retry reached for accept 3.", trainer),
    # an IB async event that reports a state change (rdma-core's event names), not an error
    ("h:1:2 [0] transport/net_ib.cc:120 NCCL WARN NET/IB : mlx5_0:1 Got async event : GID table change", trainer),
    ("h:1:2 [0] transport/net_ib.cc:120 NCCL WARN NET/IB : mlx5_0:1 Got async event : client reregistration", trainer),
    ("NCCL WARN NET/IB : Got async event : port active", trainer),
])  # fmt: skip
def test_look_alikes_stay_quiet(line, parse):
    assert not acting(parse(line))


def test_an_out_of_memory_error_of_the_host_stays_the_hosts():
    """Only a device allocator's words are the program's: Ray's OutOfMemoryError names the node's memory."""
    assert faults(trainer("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.")) == {"host_oom"}


def test_nccls_own_warn_that_names_no_failure_is_still_the_collectives():
    """NCCL prints WARN only where a call failed: its own files' WARN stays an error whatever its words."""
    line = "hpc-25-14:18569:18835 [0] bootstrap.cc:131 NCCL WARN Bootstrap Root : rank 1 of 8 ranks has already checked in"
    assert faults(trainer(line)) == {"nccl_error"}
    line = "misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3"
    assert faults(trainer(line)) == {"nccl_error"}


def test_a_plugins_quiet_warn_says_why():
    (event,) = trainer("full-debug2-test-1:4024:4048 [0] net_fastsocket.cc:765 NCCL WARN Cannot get incoming CPU.")
    assert event.data["action"] == "none" and "plugin" in event.data["quiet"]


def test_a_rule_on_a_subsystem_outside_the_job_is_recorded_with_its_reason():
    (event,) = kernel("[ 9000.100000] Bluetooth: hci0: command 0xfc05 tx timeout")
    assert event.data["action"] == "none" and "does not run on" in event.data["quiet"]
    (event,) = kernel("[ 9000.100000] ixgbe 0000:01:00.0 eth0: Detected Tx Unit Hang")
    assert event.data["action"] == "alert"
