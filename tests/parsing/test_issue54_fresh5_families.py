"""Issue 54, round 6: the families fresh batch 5 showed missing or crying wolf, each by its general
form (other members of the family than the batch's own line where there are), each beside the healthy
look-alikes that must stay quiet. Lines are stamped past BOOT_UPTIME_S or carry no clock."""

from __future__ import annotations

import pytest

from faultlens.parsing.errors import classify_nccl
from faultlens.parsing.signals import read_signal
from tests.parsing.test_issue54_fresh1_families import acting, kernel, trainer


def faults(events):
    return {e.data["fault"] for e in acting(events)}


def either(line):
    return faults(kernel(line)) | faults(trainer(line))


@pytest.mark.parametrize(("line", "fault", "parse"), [
    # old x86 crash dumps and do_exit's second oops
    ("storage1 kernel: [2497644.776876] RIP  [<ffffffff817ee088>] sock_sendmsg+0x45/0x7a", "kernel", kernel),
    ("[ 9048.099745] RIP: 0010:[<ffffffff810d112c>]  [<ffffffff810d112c>] multi_cpu_stop+0x3c/0xc0", "kernel", kernel),
    ("[ 9003.638045] Fixing recursive fault but reboot is needed!", "kernel", kernel),
    # PCIe recovery giving up on any device
    ("[ 9058.245739] nvme 0000:02:00.0: AER: can't recover (no error_detected callback)", "kernel", kernel),
    ("[ 9058.245739] mpt3sas 0000:81:00.0: AER: device recovery failed", "kernel", kernel),
    # a WARNING in a NIC or RDMA driver; in a network file system
    ("[16616.450215] WARNING: CPU: 3 PID: 11 at drivers/net/ethernet/mellanox/mlx5/core/cmd.c:900 cmd_exec+0x1/0x2 [mlx5_core]", "nic", kernel),
    ("[16616.450215] WARNING: CPU: 3 PID: 11 at drivers/infiniband/core/cma.c:5000 cma_x+0x1/0x2 [rdma_cm]", "nic", kernel),
    ("[ 9683.075352] WARNING: CPU: 6 PID: 537 at fs/cifs/connect.c:800 cifs_x+0x74/0x80 [cifs]", "storage", kernel),
    ("[ 9683.075352] WARNING: CPU: 6 PID: 537 at fs/ceph/caps.c:800 ceph_x+0x74/0x80 [ceph]", "storage", kernel),
    # SCSI commands timing out or failing below the sense
    ("[ 9283.927722] sd 2:0:1:0: [sdc] timing out command, waited 60s", "storage", kernel),
    ("[ 9407.147766] sd 0:0:0:0: [sda] tag#2 FAILED Result: hostbyte=DID_TIME_OUT driverbyte=DRIVER_OK cmd_age=30s", "storage", kernel),
    ("[ 9407.147766] sd 0:0:0:0: [sda] Result: hostbyte=DID_NO_CONNECT driverbyte=DRIVER_OK", "storage", kernel),
    # Ceph's cluster health and the rbd CLI
    ("2019-01-01 00:00:00.0 7f97 0 log_channel(cluster) log [ERR] : Health check update: HEALTH_ERR 1 pgs inconsistent", "storage", kernel),
    ("rbd: sysfs write failed", "storage", kernel),
    ("rbd: unmap failed: (16) Device or resource busy", "storage", kernel),
    # systemd failing a network file system's unit
    ("Oct 26 17:02:24 n1 systemd[1]: Failed to start Lustre client.", "storage", kernel),
    ("Oct 26 17:02:24 n1 systemd[1]: Failed to mount /mnt/scratch (NFS).", "storage", kernel),
    ("Oct 26 17:02:24 n1 systemd[1]: beegfs-client.service: Failed with result 'exit-code'.", "storage", kernel),
    # a network block store's own errors; SPDK's NVMe-oF target
    ("2024-11-25T22:44:49.884336Z :BLOCKSTORE_VOLUME CRIT: [1] read failed: E_IO", "storage", trainer),
    ("CRITICAL_EVENT:AppCriticalEvents/DiskAgentIoError:dev 3", "storage", trainer),
    ("[2022-03-25 14:42:54.738833] tcp.c: 1200:nvmf_tcp_qpair_disconnect: *ERROR*: qpair lost", "storage", trainer),
    # RDMA completion errors as verbs programs print them
    ("F20250821 13:22:09.976752 31 rdma.cc:90] Check failed: wc.status == IBV_WC_SUCCESS (12 vs. 0)", "nccl_error", trainer),
    ("  Failed status 12: wr_id 0 syndrom 0x81", "nccl_error", trainer),
    ("Completion with error at server", "nccl_error", trainer),
    # NVML's GPU lost; AMD's wave trap and ROCm's page fault
    ("pynvml.NVMLError_GpuIsLost: GPU is lost", "gpu_lost", trainer),
    ("nvml error: GPU is lost", "gpu_lost", trainer),
    ("[22340.220490] amdgpu: sq_intr: error, detail 0x00000000, type 2, sh 0, priv 1, wave_id 0, simd_id 2, wgp_id 1", "app_fault", kernel),
    ("Memory access fault by GPU node-2 (Agent handle: 0x5a0) on address 0x7f00. Reason: Write access to a read-only page.", "app_fault", trainer),
    # a scheduler's memory limit; a switch port going down
    ("job 88 exceeded SWAP usage hard limit (10 > 4)", "host_oom", trainer),
    ("Interface Ethernet12, changed state to down", "nic", trainer),
    # a loss by any name, bare
    ("epoch 3 gen_loss nan", "nan_loss", trainer),])  # fmt: skip
def test_a_family_member_gets_its_class(line, fault, parse):
    """Read by the parser of the log it is written to: the kernel's (and the journal's) or a program's."""
    assert faults(parse(line)) == {fault}


@pytest.mark.parametrize("line", [
    "[ 9048.099745] RIP: 0033:[<00007f00>]  [<00007f00>] 0x7f00",
    "[ 9058.245739] nvme 0000:02:00.0: AER: device recovery successful",
    "[ 9407.147766] sd 0:0:0:0: [sda] tag#2 Result: hostbyte=DID_OK driverbyte=DRIVER_SENSE",
    "[ 9407.147766] sd 0:0:0:0: [sda] Result: hostbyte=0x00 driverbyte=0x00",
    "2019-01-01 00:00:00.0 7f97 0 log_channel(cluster) log [INF] : overall HEALTH_OK",
    "rbd: map succeeded",
    "Oct 26 17:02:24 n1 systemd[1]: Started BeeGFS Client.",
    "Oct 26 17:02:24 n1 systemd[1]: Failed to start Bluetooth service.",
    "2024-11-25T22:44:49.884336Z :BLOCKSTORE_RDMA INFO: connection established",
    "Interface Ethernet12, changed state to up",
    "nvmlInit ok: 8 GPUs found",
    "ep_rewmean nan",
    "Device: /dev/sda [SAT], Failed SMART usage Attribute: 193 Load_Cycle_Count.",
    "Device: /dev/sda [SAT], SMART Usage Attribute: 194 Temperature_Celsius changed from 36 to 37",
])  # fmt: skip
def test_look_alikes_stay_quiet(line):
    assert not either(line)


def test_a_signal_named_with_its_number_is_read():
    for line in ("Process 91762 (python) of user 60105 terminated abnormally with signal 11/SEGV, processing...",
                 "convert: abort due to signal 8 (SIGFPE) \"Floating point exception\"..."):
        assert read_signal(line, line)
        assert faults(trainer(line)) == {"user_code"}
    line = "Process 91762 (python) of user 60105 terminated abnormally with signal 6/ABRT, processing..."
    assert not faults(trainer(line))  # SIGABRT ends an error printed before it: recorded


def test_nccl_tests_older_failure_line_is_an_nccl_error():
    assert faults(trainer("NCCL failure common.cu:921 'unhandled system error'")) == {"nccl_error"}
    assert classify_nccl("NCCL failure common.cu:921 'unhandled system error'") == "NCCL failure common.cu:921: unhandled system error"
