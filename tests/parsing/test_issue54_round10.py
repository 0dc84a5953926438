"""Issue 54 round 10: families every unseen batch missed, from the programs' own formats, before
the sealed batches (fresh11, fresh12) were read.

- A daemon's syslog line names no kernel subsystem; the program's tag does (parsing/subsystems.toml
  ``programs``): an error line of an NFS, Lustre, GPFS, BeeGFS, Ceph, CIFS, iSCSI or multipath daemon
  is storage's, of an RDMA daemon the NIC's; a time daemon's lines are recorded (they print notices
  in error words), its clock failures are a rule (clock.daemon_fault, by linuxptp's, chrony's and
  ntpd's formats and levels).
- The line model is the one shipped before: retrained on every mined row (fresh1-10 too) it gained
  only on its own training rows and read three real lines the tests hold quiet as faults
  (docs/rules.md, round 10).
"""

from __future__ import annotations

import pytest

from faultlens.parsing.subsystems import by_program
from faultlens.parsing.timestamps import program_of
from tests.parsing.line_events import acting as _acting


@pytest.mark.parametrize(("line", "program"), [
    ("Nov 22 10:11:12 gpu01 chronyd[812]: Selected source 10.0.0.1", "chronyd"),
    ("2024-01-01T00:00:00.123456+00:00 gpu01 rpc.gssd[4242]: ERROR: No credentials found", "rpc.gssd"),
    ("Nov 22 10:11:12 gpu01 kernel: [ 12.5] nfs: server a not responding", None),
    ("[  12.500000] nfs: server a not responding", None),
    ("2024-01-01T00:00:00,123456+00:00 nfs: server a not responding", None),  # dmesg --time-format iso: no host, no tag
])
def test_program_of_reads_the_syslog_tag(line: str, program: str | None) -> None:
    assert program_of(line) == program


def test_programs_are_named_exactly_or_by_their_prefix_never_by_a_kernel_tag() -> None:
    assert by_program("rpc.mountd").fault == "storage"
    assert by_program("beegfs-client").fault == "storage"
    assert by_program("ceph-osd").fault == "storage"
    assert by_program("mount.cifs").fault == "storage"
    assert by_program("srp_daemon").fault == "nic"
    assert by_program("ptp4l").fault == "clock_skew" and by_program("ptp4l").action == "none"
    # a kernel tag is no program's name: "net", "session", "sd" must not class a daemon
    for name in ("net", "session", "sd", "systemd", "sshd", "containerd", "nvidia-fabricmanager-start.sh"):
        assert by_program(name) is None, name


@pytest.mark.parametrize(("line", "fault"), [
    # nfs-utils utils/gssd (printerr at 0 is its error level), the krb5 credentials an NFS mount needs
    ("Nov 22 10:11:12 gpu01 rpc.gssd[4242]: ERROR: No credentials found for connection to server nfs01", "storage"),
    ("Nov 22 10:11:12 gpu01 beegfs-client[3121]: Failed to connect to management node: mgmt01", "storage"),
    ("Nov 22 10:11:12 gpu01 srp_daemon[901]: failed to open /dev/infiniband/umad0", "nic"),
])
def test_a_daemons_error_line_is_its_programs_class(line: str, fault: str) -> None:
    got = _acting(line)
    assert got and got[0].data["fault"] == fault and got[0].data["action"] == "alert", got
    assert got[0].data["basis"] == "subsystem"


@pytest.mark.parametrize("line", [
    "Nov 22 10:11:12 gpu01 rpc.mountd[1473]: Caught signal 15, un-registering and exiting.",
    "Nov 22 10:11:12 gpu01 beegfs-client[3121]: Started BeeGFS Client (version 7.4.2)",
    # a program the table does not name is not classed by its tag
    "Sep 18 03:19:01 ubuntu2404 nvidia-fabricmanager-start.sh[4756]: request to query NVSwitch device information from NVSwitch driver failed with error",
])
def test_daemon_lines_without_a_failure_stay_quiet(line: str) -> None:
    assert _acting(line) == []


# linuxptp (port.c pr_notice of the port's state change; sk.c, port.c, clock.c pr_err), chrony
# (local.c LOGS_ERR / LOGS_WARN), ntpd (ntp_loopfilter.c LOG_NOTICE): the clock itself failing.
CLOCK_FAULTS = [
    "ptp4l[199.536]: port 1 (enp2s0): SLAVE to FAULTY on FAULT_DETECTED (FT_UNSPECIFIED)",
    "Nov 22 10:11:12 gpu01 ptp4l[812]: [5374018.735] timed out while polling for tx timestamp",
    "ptp4l[13266.652]: missing timestamp on transmitted sync",
    "ptp4l[3263.061]: port 1 (ens3f2): received SYNC without timestamp",
    "Nov 22 10:11:12 gpu01 chronyd[812]: Could not step system clock",
    "Nov 22 10:11:12 gpu01 chronyd[812]: Frequency 612.3 ppm exceeds allowed maximum",
    "Nov 15 12:33:36 dws77 ntpd[2359]: frequency error -512 PPM exceeds tolerance 500 PPM",
]


@pytest.mark.parametrize("line", CLOCK_FAULTS)
def test_a_time_daemons_clock_failure_is_clock_skew(line: str) -> None:
    got = _acting(line)
    assert [(e.data["fault"], e.data["action"]) for e in got] == [("clock_skew", "alert")], got


# Their ordinary lines, some in error words, logged by the daemon at info or notice.
CLOCK_QUIET = [
    "ptp4l[13282.654]: port 1: FAULTY to LISTENING on INIT_COMPLETE",
    "ptp4l[7727.127]: selected local clock 6805ca.fffe.c87ac2 as best master",
    "ptp4l[199.082]: master offset         -6 s2 freq  +22345 path delay       631",
    "ptp4l[361.224]: port 1: UNCALIBRATED to SLAVE on MASTER_CLOCK_SELECTED",
    "phc2sys[812.001]: CLOCK_REALTIME phc offset      -12 s2 freq   +1234 delay    567",
    "Nov 22 10:11:12 gpu01 systemd-timesyncd[612]: Timed out waiting for reply from 10.0.0.1:123 (ntp.ubuntu.com).",
    "Nov 22 10:11:12 gpu01 chronyd[812]: Selected source 10.0.0.1",
    "Nov 22 10:11:12 gpu01 chronyd[812]: Source 10.0.0.1 offline",
    "Nov 22 10:11:12 gpu01 chronyd[812]: Can't synchronise: no selectable sources",
]


@pytest.mark.parametrize("line", CLOCK_QUIET)
def test_a_time_daemons_ordinary_lines_never_act(line: str) -> None:
    assert _acting(line) == []


def test_habana_gaudi_driver_errors_are_the_devices() -> None:
    got = _acting("[ 8123.456789] habanalabs hl0: Device CPU packet timeout (0x1)")
    assert got and got[0].data["fault"] == "gpu_reset_required" and got[0].data["action"] == "alert", got


@pytest.mark.parametrize(("line", "acts"), [
    # GPFS's message severity tags as mmfsd writes them to syslog (IBM Spectrum Scale docs)
    ("Nov 22 10:11:12 gpu01 mmfs[4242]: [E] Unable to contact any quorum nodes during cluster probe.", True),
    ("Nov 22 10:11:12 gpu01 mmfs[4242]: [X] File System gpfs1 unmounted by the system with return code 5 reason code 0", True),
    ("Nov 22 10:11:12 gpu01 mmfs[4242]: [I] Command: successful mount gpfs1", False),
    ("Nov 22 10:11:12 gpu01 mmfs[4242]: [N] Connecting to 10.0.0.3 gpfs03 <c0p2>", False),
])
def test_a_daemons_one_letter_level_is_its_level(line: str, acts: bool) -> None:
    got = _acting(line)
    assert bool(got) == acts, got
    assert all(e.data["fault"] == "storage" for e in got)


@pytest.mark.parametrize(("line", "fault"), [
    # oneapi-src/level-zero include/ze_api.h and the Unified Runtime's ur_api.h result names
    ("RuntimeError: Level Zero error: ZE_RESULT_ERROR_DEVICE_LOST", "gpu_lost"),
    ("RuntimeError: UR error: UR_RESULT_ERROR_DEVICE_LOST", "gpu_lost"),
    ("zeCommandQueueSynchronize returned ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET", "gpu_reset_required"),
    ("RuntimeError: UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", "user_code"),  # the program asked too much, as CUDA's OOM
    ("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity)", "user_code"),
    # torch_npu's AT_ERROR after aclrtSynchronizeStream, CANN's own wording: a device task failed, as CUDA's errors at a sync
    ("[rank5]: RuntimeError: ACL stream synchronize failed, error code:507034", "cuda_error"),
    ("E39999: Inner Error! Synchronize stream failed. error code is 507015", "cuda_error"),
    # ROCR-Runtime runtime.cpp: a KFD hardware exception whose cause is not ECC
    ("HW Exception by GPU node-1 (Agent handle: 0x55d7a2ab1b30) reason :GPU Hang", "gpu_reset_required"),
])
def test_other_accelerators_runtime_errors_by_their_own_names(line: str, fault: str) -> None:
    got = _acting(line, "nccl")
    assert got and got[0].data["fault"] == fault, got


def test_an_info_line_naming_a_device_runtime_error_is_recorded() -> None:
    assert _acting("[2024-01-01 10:00:00] INFO ZE_RESULT_ERROR_DEVICE_LOST is handled by retrying", "nccl") == []


@pytest.mark.parametrize(("line", "fault"), [
    # amdgpu_ras.c / amdgpu_umc.c, dev_info: the GPU's memory controller
    ("[12345.678] amdgpu 0000:03:00.0: amdgpu: 1 uncorrectable hardware errors detected in umc block", "gpu_memory"),
    # a kmsg record at info (header "level,seq,usec;"), 5123 s after boot: not a boot-time line
    ("6,902,5123456789;amdgpu 0000:c3:00.0: amdgpu: socket: 0, die: 1, 3 new uncorrectable hardware errors detected in UMC block", "gpu_memory"),
])
def test_amdgpu_uncorrectable_memory_errors_are_the_gpus_memory(line: str, fault: str) -> None:
    got = _acting(line)
    assert [(e.data["fault"], e.data["action"]) for e in got] == [(fault, "alert")], got


@pytest.mark.parametrize("line", [
    "[12345.678] amdgpu 0000:03:00.0: amdgpu: 0 uncorrectable hardware errors detected in umc block",
    "[12345.678] amdgpu 0000:c3:00.0: amdgpu: no uncorrectable hardware errors detected in umc block",
    "[12345.678] amdgpu 0000:03:00.0: amdgpu: 2 correctable hardware errors detected in umc block",
    # another block's count at its own level, info: recorded
    "6,902,5123456789;amdgpu 0000:c3:00.0: amdgpu: 3 uncorrectable hardware errors detected in gfx block",
])
def test_amdgpu_ras_counts_of_none_or_corrected_stay_quiet(line: str) -> None:
    assert _acting(line) == []


@pytest.mark.parametrize(("line", "fault"), [
    # net/sunrpc xprtsock.c names its function as the tag; a negative errno after "rc=" is a failure
    # (fs/smb/client: "No writable handle in writepages rc=%d"); librdmacm's failed connection events
    ("[12345.678] xs_tcp_setup_socket: connect returned unhandled error -107", "storage"),
    ("[12345.678] CIFS: VFS: No writable handle in writepages rc=-9", "storage"),
    ("[12345.678] nvme nvme0: RDMA_CM_EVENT_UNREACHABLE", "storage"),
])
def test_network_storage_failures_in_their_transports_words(line: str, fault: str) -> None:
    got = _acting(line)
    assert got and got[0].data["fault"] == fault, got


@pytest.mark.parametrize("line", [
    "[12345.678] nvme nvme0: RDMA_CM_EVENT_ESTABLISHED",
    "[12345.678] CIFS: VFS: cifs_read rc=0",
])
def test_their_success_words_stay_quiet(line: str) -> None:
    assert _acting(line) == []


@pytest.mark.parametrize("line", [
    # ompi opal/mca/btl/openib/btl_openib_component.c handle_wc; ompi/mca/pml/ucx/pml_ucx.c PML_UCX_ERROR
    "[gpu01:12345] [[12345,1],0][btl_openib_component.c:3644:handle_wc] from gpu01 to: gpu02 error polling LP CQ with status RETRY EXCEEDED ERROR status number 12 for wr_id 0x1 opcode 0  vendor error 129 qp_idx 3",
    "[gpu01:01234] pml_ucx.c:419  Error: ucp_ep_create(proc=3) failed: Destination is unreachable",
    "[gpu02:05215] pml_ucx.c:472  Error: Failed to resolve UCX endpoint for rank 0",
])
def test_open_mpis_transport_errors_are_the_collectives(line: str) -> None:
    got = _acting(line, "nccl")
    assert [(e.data["fault"], e.data["action"]) for e in got] == [("nccl_error", "reattempt")], got


def test_open_mpis_ucx_warnings_stay_quiet() -> None:
    line = "[gpu01:01234] pml_ucx.c:178  Warning: UCX is unable to handle VM_UNMAP event. This may cause performance degradation or data corruption."
    assert _acting(line, "nccl") == []
