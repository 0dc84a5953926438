"""Issue 54, round 40 (fresh79 and fresh80 opened, G23): Slurm's accounting plugin killing a step past its memory limit
in each shape it prints, an AMD GPU's fault record under the device's own prefix, the BSD kernels' out-of-memory kill,
and a verbs queue pair refusing its state change outside NCCL's WARN.

Every line is written for the test (other hosts, devices, jobs, processes and numbers than the corpus rows), beside the
healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import verdicts


def _read(line: str, source: str) -> list[tuple[object, object]]:
    """(fault, action) of each event of ``line`` in ``source``'s stream."""
    return verdicts(line, source)


def _faults(line: str, source: str) -> list[object]:
    return [f for f, a in _read(line, source) if a not in ("none", None)]


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: Job 91127 exceeded memory limit (73400320 > 67108864), being killed",
        "slurmstepd: error: StepId=4410.0 exceeded memory limit (8812000 > 8388608), being killed",
        "slurmstepd-gpu17: error: JobId=5521 exceeded virtual memory limit (9912000 > 8388608), being killed",
        "[2024-03-02T11:40:09.512] error: Step 3021.2 exceeded memory limit (1048900 > 1048576), being killed",
    ],
)
def test_slurms_accounting_kill_past_the_memory_limit_is_host_oom(line: str) -> None:
    assert ("host_oom", "restart") in _read(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: *** JOB 91127 ON gpu17 CANCELLED AT 2024-03-02T11:40:09 ***",
        "slurmstepd: debug:  Job 91127 memory used:7340032 limit:67108864 KB",
        "worker 3 exceeded memory limit (2048 MB > 1024 MB)",
    ],
)
def test_lines_beside_slurms_memory_kill_are_not_read_by_it(line: str) -> None:
    assert ("host_oom", "restart") not in _read(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "amdgpu 0000:c1:00.0: GCVM_L2_PROTECTION_FAULT_STATUS:0x00B01031",
        "[ 8812.004511] amdgpu 0000:83:00.0: MMVM_L2_PROTECTION_FAULT_STATUS:0x00000000",
        "amdgpu 0000:c1:00.0:   in page starting at address 0x00007f2a11200000 from client 0x1b (UTCL2)",
        "amdgpu 0000:c1:00.0:  in process python3 pid 40912 thread python3 pid 40950",
        "amdgpu 0000:c1:00.0: amdgpu: GCVM_L2_PROTECTION_FAULT_STATUS:0x00B01031",
    ],
)
def test_an_amd_gpus_fault_record_under_the_device_prefix_is_app_fault(line: str) -> None:
    assert "app_fault" in _faults(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "amdgpu 0000:c1:00.0: amdgpu: VRAM: 65520M 0x0000008000000000 - 0x0000008FFEFFFFFF (65520M used)",
        "amdgpu 0000:c1:00.0: amdgpu: SE 8, SH per SE 2, CU per SH 8, active_cu_number 60",
        "amdgpu 0000:c1:00.0: amdgpu: ring gfx_0.0.0 uses VM inv eng 0 on hub 0",
    ],
)
def test_an_amd_gpus_ordinary_lines_are_quiet(line: str) -> None:
    assert _faults(line, "kernel") == []


@pytest.mark.parametrize(
    "line",
    [
        "Oct  3 18:02:44 storage9 kernel: pid 3310 (postgres), uid 770, was killed: out of swap space",
        "Oct  3 18:02:44 storage9 kernel: pid 3310 (postgres), jid 2, uid 770, was killed: failed to reclaim memory",
        "pid 1180 (node), jid 0, uid 0, was killed: a thread waited too long to allocate a page",
        "pid 2214 was killed: out of swap",
    ],
)
def test_the_bsd_kernels_out_of_memory_kill_is_host_oom(line: str) -> None:
    assert ("host_oom", "restart") in _read(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "Oct  3 18:02:44 storage9 kernel: pid 3310 (burn), uid 770, was killed: exceeded maximum CPU limit",
        "Oct  3 18:02:44 storage9 kernel: pid 3310 (sshd), jid 0, uid 0: exited on signal 15",
    ],
)
def test_the_bsd_kernels_other_kills_are_not_host_oom(line: str) -> None:
    assert "host_oom" not in _faults(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "ibv_modify_qp failed with 22, dev mlx5_2, local GID index 1, local GID fe80::1",
        "[rank2]: Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, curr state RTR, next state RTS",
        "transport/rdma.c:612 ibv_modify_qp(qp=0x55d1) failed: Invalid argument",
        "gpu-a7:1203:1290 [0] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with 61 No data available, on dev mlx5_1:1",
    ],
)
def test_a_queue_pair_refusing_its_state_change_is_nccl_error(line: str) -> None:
    assert ("nccl_error", "reattempt") in _read(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "gpu-a7:1203:1290 [0] NCCL INFO NET/IB: Dev 1 Port 1 qpn 4412 mtu 5 GID 3 (0/C0A80A0CFFFF0000)",
        "gpu-a7:1203:1290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/1",
        "calling ibv_modify_qp to move qp 4412 to RTS",
    ],
)
def test_queue_pair_setup_that_goes_through_is_quiet(line: str) -> None:
    assert "nccl_error" not in _faults(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "Error: Error(drive not found) reading erasure shards at (http://store-3:9000/mnt/d2: datasets/shard-0007/part.4), will attempt to reconstruct if we have quorum (*fmt.wrapError)",
        "API: GetObject(bucket=ckpt, object=run7/step_12000.pt) Error: Read failed. Insufficient number of drives online (cmd.InsufficientReadQuorum)",
    ],
)
def test_minio_failing_to_read_a_shard_or_losing_quorum_is_storage(line: str) -> None:
    assert "storage" in _faults(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "Healing drive '/mnt/d2' complete (healed: 88, skipped: 0, failed: 0).",
        "All MinIO sub-systems initialized successfully in 11.1ms",
    ],
)
def test_minio_healing_done_or_starting_up_is_quiet(line: str) -> None:
    assert _faults(line, "nccl") == []


@pytest.mark.parametrize(
    "line",
    [
        "Mar 14 02:10:11 vm-ib3 kernel: mlx4_core 5c1e:00:02.0: Sending reset",
        "[    4.912004] mlx4_core 5c1e:00:02.0: Sending vhcr0",
    ],
)
def test_an_mlx4_virtual_functions_comm_channel_handshake_is_quiet(line: str) -> None:
    assert _faults(line, "kernel") == []


def test_an_mlx4_virtual_function_that_fails_to_come_up_is_still_nic() -> None:
    assert "nic" in _faults("Mar 14 02:10:11 vm-ib3 kernel: mlx4_core 5c1e:00:02.0: Failed to initialize slave", "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "drmn0: [gfxhub] VMC page fault (src_id:0 ring:24 vm_id:3 pas_id:32770)",
        "[ 4411.208113] amdgpu 0000:0b:00.0: [mmhub] VMC page fault (src_id:0 ring:153 vmid:0 pasid:0)",
    ],
)
def test_an_amd_gpus_older_vmc_page_fault_header_is_app_fault(line: str) -> None:
    assert "app_fault" in _faults(line, "kernel")


def test_xfs_finding_a_directory_entry_naming_an_impossible_inode_is_storage() -> None:
    assert ("storage", "alert") in _read("[ 7310.554120] XFS (md127): Invalid inode number 0x2000000a1", "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "[ 7310.554120] XFS (md127): Mounting V5 Filesystem 4f0c3a1e-6b7d-4a55-9a61-0d2b9c7e11aa",
        "[ 7310.554120] XFS (md127): Ending clean mount",
        "[ 7310.554120] XFS (md127): Quotacheck: Done.",
    ],
)
def test_xfs_mounting_is_quiet(line: str) -> None:
    assert _faults(line, "kernel") == []
