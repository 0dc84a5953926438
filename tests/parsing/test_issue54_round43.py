"""Issue 54, round 43 (fresh85 and fresh86 opened, G28): a firmware error record's own informational severity, a
driver's probe that found no device (-ENODEV), boot-time probe failures quiet by their uptime, a BMC's record of a
failing drive, an md array assembled degraded, arm64's older synchronous external abort, mlx5_ib's completion error in
newer kernels' words; on the trainer's side an Ascend NPU's runtime errors and device memory refused, ROCm's build
without code for the device, UCX's transport resources and its device call, Paddle's NCCL result and a YOLO
trainer's NaN loss columns.

Every line is written for the test (other hosts, stamps, devices, codes and numbers than the corpus rows), beside the
healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting_verdicts, events, verdicts

# ---- a CPER record's own severity field (parsing/severity.py) ----


@pytest.mark.parametrize(
    "line",
    [
        "[ 9021.114502] {3}[Hardware Error]: event severity: info",
        "[ 9021.114530] {3}[Hardware Error]:  Error 0, type: info",
        "Mar  2 11:04:17 gpu-a07 kernel: {12}[Hardware Error]: event severity: info",
    ],
)
def test_a_firmware_records_informational_severity_is_quiet(line: str) -> None:
    assert acting_verdicts(line) == []


@pytest.mark.parametrize(
    "line",
    [
        "[ 9021.114502] {3}[Hardware Error]: event severity: fatal",
        "[ 9021.114502] {3}[Hardware Error]: event severity: recoverable",
        "[ 9021.114530] {3}[Hardware Error]:  Error 1, type: fatal",
    ],
)
def test_its_fatal_and_recoverable_severities_still_alert(line: str) -> None:
    assert acting_verdicts(line) == [("kernel", "alert")]


# ---- a probe or registration that found no device (parsing/kernel_quiet.py no_such_device) ----


@pytest.mark.parametrize(
    "line",
    [
        "[Tue Jun  3 14:22:51 2025] EDAC sbridge: Failed to register device with error -19.",
        "[ 4410.201337] EDAC skx: Failed to register device with error -19.",
        "[ 4410.201337] tg3 0000:05:00.0: phy probe failed, err -19",
        "[ 4410.201337] ixgbe 0000:3b:00.1: probe failed with error -ENODEV",
    ],
)
def test_a_probe_that_found_no_device_is_recorded_not_alerted(line: str) -> None:
    found = events(line)
    assert found and all(e.data.get("action") in (None, "none") for e in found)


@pytest.mark.parametrize(
    "line",
    [
        "[Tue Jun  3 14:22:51 2025] EDAC sbridge: Failed to register device with error -12.",
        "[ 4410.201337] meson8b-dwmac c9410000.ethernet eth1: stmmac_open: Cannot attach to PHY (error: -19)",
        "[ 4410.201337] EXT4-fs warning (device dm-3): ext4_end_bio:343: I/O error -19 writing to inode 881 (offset 0 size 4096 starting block 1200)",
    ],
)
def test_another_error_or_a_non_probe_minus_19_still_alerts(line: str) -> None:
    assert acting_verdicts(line) != []


# ---- boot-time probe failures are quiet by their uptime stamp, not their words (parsing/kernel_quiet.py at_boot) ----


def test_a_nic_probe_failure_at_boot_is_recorded_and_the_same_line_later_alerts() -> None:
    at_boot = events("[    1.204411] tg3 0003:02:00.0: Problem fetching invariants of chip, aborting")
    assert at_boot and all(e.data.get("boot") and e.data.get("action") == "none" for e in at_boot)
    later = "[ 5120.204411] tg3 0003:02:00.0: Problem fetching invariants of chip, aborting"
    assert acting_verdicts(later) == [("nic", "alert")]


# ---- a BMC SEL record of a failing drive (rule host.bmc_sel_drive_fault) ----


@pytest.mark.parametrize(
    "line",
    [
        " 1f2 | 08/14/2024 | 03:12:40 | Drive Slot / Bay #0x21 | Drive Fault | Asserted",
        "  3a | 01/02/2025 | 22:00:09 | Drive Slot HDD3 | Predictive Failure | Asserted",
        "  3b | 01/02/2025 | 22:00:10 | Drive Slot / Bay #0x03 | In Failed Array | Asserted",
        "  3c | 01/02/2025 | 22:00:11 | Drive Slot / Bay #0x03 | In Critical Array | Asserted",
    ],
)
def test_a_sel_record_of_a_failing_drive_is_storage_and_an_alert(line: str) -> None:
    for source in ("kernel", "nccl"):
        assert verdicts(line, source) == [("storage", "alert")], source


@pytest.mark.parametrize(
    "line",
    [
        " 1f3 | 08/14/2024 | 03:14:02 | Drive Slot / Bay #0x21 | Drive Fault | Deasserted",
        " 1f4 | 08/14/2024 | 03:14:03 | Drive Slot / Bay #0x21 | Drive Present | Asserted",
        " 1f5 | 08/14/2024 | 03:14:04 | Drive Slot / Bay #0x21 | Rebuild/Remap in progress | Asserted",
        " 1f6 | 08/14/2024 | 03:14:05 | Drive Slot / Bay #0x21 | Hot Spare | Asserted",
    ],
)
def test_a_drives_presence_rebuild_spare_or_deasserted_fault_is_quiet(line: str) -> None:
    assert acting_verdicts(line) == []


# ---- an md array assembled degraded (rule storage.md_degraded) ----


@pytest.mark.parametrize(
    "line",
    [
        "[ 3301.440912] md/raid1:md2: active with 1 out of 2 mirrors",
        "[ 3301.440912] md/raid10:md4: active with 3 out of 4 mirrors",
        "[ 3301.440912] md/raid:md9: raid level 5 active with 3 out of 4 devices, algorithm 2",
        "Jan  9 04:00:12 nas kernel: raid1: raid set md3 active with 1 out of 2 mirrors",
    ],
)
def test_an_array_assembled_with_fewer_members_than_its_own_is_storage(line: str) -> None:
    assert acting_verdicts(line) == [("storage", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        "[ 3301.440912] md/raid1:md2: active with 2 out of 2 mirrors",
        "[ 3301.440912] md/raid:md9: raid level 6 active with 12 out of 12 devices, algorithm 2",
        "Jan  9 04:00:12 nas kernel: raid1: raid set md3 active with 2 out of 2 mirrors",
    ],
)
def test_a_whole_array_is_quiet(line: str) -> None:
    assert acting_verdicts(line) == []


def test_a_degraded_array_at_boot_is_recorded() -> None:
    found = events("[   12.503301] md/raid1:md126: active with 1 out of 2 mirrors")
    assert [(e.data["fault"], e.data["action"]) for e in found] == [("storage", "none")]


# ---- arm64's older synchronous external abort report (rule kernel.crash_detail) ----


def test_arm64s_older_external_abort_report_is_kernel() -> None:
    line = "[ 8830.120044] Synchronous External Abort: synchronous external abort (0x96000210) at 0xffff000012a4c010"
    assert acting_verdicts(line) == [("kernel", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        "[ 8830.120044] Synchronous External Abort handler registered",
        "[ 8830.120044] arm64: synchronous external abort reporting enabled",
    ],
)
def test_words_about_the_abort_handler_are_quiet(line: str) -> None:
    assert acting_verdicts(line) == []


# ---- mlx5_ib's completion error with a lower-case 'message:' (rule rdma.kernel_completion_error) ----


def test_mlx5_ibs_completion_error_in_newer_words_is_nccl_error() -> None:
    line = "[77120.004411] infiniband mlx5_3: mlx5_handle_error_cqe:346:(pid 812): WC error: 5, message: Work Request Flushed Error"
    assert acting_verdicts(line) == [("nccl_error", "alert")]


# ---- an Ascend NPU's runtime errors (parsing/cuda_errors.py; rule npu.device_task_failed) ----


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: synchronize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:361 NPU function error: c10_npu::acl::AclrtSynchronizeStreamWithTimeout(stream()), error code is 507014",
        "(Worker pid=2210) ERROR 01-07 09:10:11 [multiproc_executor.py:600] RuntimeError: npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:479 NPU function error: AclrtSynchronizeDeviceWithTimeout, error code is 507034",
        "EZ9999: Inner Error! 2025-01-02-03:04:05.678.901  there is an exception of fftsplus aicore error, core id is 3, error code = 0x800000",
        "    Message info[0]:RTS_HWTS: aicpu exception, slot_id=2, stream_id=11",
        "[Error]: The vector core execution is abnormal.",
        "EH9999: 2025-02-03-04:05:06.789.012  wait for compute device to finish failed, runtime result = 507015.",
    ],
)
def test_an_npu_runtimes_device_failure_is_cuda_error(line: str) -> None:
    assert {f for f, _ in verdicts(line, "nccl")} == {"cuda_error"}


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: SetDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:37 NPU function error: c10_npu::SetDevice(device_id), error code is 107001",
        "[W compiler_depend.ts:51] Warning: aicore error dump is enabled, this may slow the run",
        "[INFO] RUNTIME(1234,python):2025-01-02-03:04:05.678.901 [stream.cc:100] Stream synchronize success, stream_id=3",
    ],
)
def test_another_npu_call_or_the_runtimes_notices_are_not_cuda_error(line: str) -> None:
    assert "cuda_error" not in {f for f, _ in verdicts(line, "nccl")}


# ---- an NPU's device memory refused (rule npu.device_alloc_failed; parsing/exception_subject.py) ----


@pytest.mark.parametrize(
    "line",
    [
        "[PID: 4412] 2025-05-06-07:08:09.101.112 Memory_Allocation_Failure(EL0004): Failed to allocate memory requested by GE module.",
        "        Call rtMalloc fail, purpose: feature map, type = 2, size:1073741824, device_id:3[FUNC:Alloc][FILE:device_allocator.cc][LINE:72]",
        "RuntimeError: Malloc for kernel workspace failed, Memory isn't enough, node:Default/MatMul-op12",
    ],
)
def test_an_npus_device_memory_refused_is_user_code(line: str) -> None:
    assert {f for f, _ in verdicts(line, "nccl")} == {"user_code"}


@pytest.mark.parametrize(
    "line",
    [
        "[INFO] GE(4412,python):2025-05-06-07:08:09.101.112 [graph_mem_assigner.cc:100] Malloc for kernel output, size 4096",
        "RuntimeError: Malloc for kernel output succeeded after retry",
    ],
)
def test_an_allocation_that_did_not_fail_is_not_user_code(line: str) -> None:
    assert "user_code" not in {f for f, _ in verdicts(line, "nccl")}


# ---- ROCm's build without a code object for the device (rule rocm.no_code_object_for_isa) ----


def test_no_code_object_for_the_devices_isa_is_user_code() -> None:
    line = ":1:hip_fatbin.cpp           :265 : 1029384756 us: [pid:5521 tid:0x7f00aa] Cannot find CO in the bundle /opt/rocm-6.1.0/lib/librocblas.so.4 for ISA: amdgcn-amd-amdhsa--gfx1100"
    assert verdicts(line, "nccl") == [("user_code", "rollback")]


def test_the_runtimes_info_about_code_objects_is_quiet() -> None:
    line = ":3:hip_fatbin.cpp           :120 : 1029384756 us: [pid:5521 tid:0x7f00aa] Found CO in the bundle for ISA: amdgcn-amd-amdhsa--gfx90a"
    assert acting_verdicts(line, "nccl") == []


# ---- UCX's transport resources and its device call (rules nccl.ucx_transport_resource_failed, nic.verbs_device_call_failed) ----


@pytest.mark.parametrize(
    "line",
    [
        "[1700000000.123456] [cn042:9912:0]           ib_md.c:309  UCX  ERROR ibv_reg_mr(address=0x7f2a00000000, length=1048576, access=0xf) failed: Cannot allocate memory",
        "[1700000000.123456] [cn042:9912:0]            sys.c:770  UCX  ERROR shmget(size=4194304 flags=0x7b0) for mm_recv_desc failed: No space left on device, please check shared memory limits by 'ipcs -l'",
        "[1700000000.123456] [cn042:9912:0]          mm_ep.c:170  UCX  ERROR   mm ep failed to connect to remote FIFO id 0xd0000000a1: Shared memory error",
    ],
)
def test_ucxs_transport_resources_failing_are_nccl_error(line: str) -> None:
    assert verdicts(line, "nccl") == [("nccl_error", "reattempt")]


def test_ucx_opening_the_device_is_the_nics() -> None:
    line = "[1700000000.123456] [cn042:9912:0]          ib_md.c:1690 UCX  ERROR ibv_open_device(mlx5_2) failed: No such device"
    assert verdicts(line, "nccl") == [("nic", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        "[1700000000.123456] [cn042:9912:0]          ib_log.c:246  UCX  ERROR mlx5_1: ibv_create_cq() failed: Cannot allocate memory. Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)",
        "[1700000000.123456] [cn042:9912:0]          parser.c:1911 UCX  WARN  unused environment variable: UCX_SHM_DEVICES",
        "[1700000000.123456] [cn042:9912:0]        mm_posix.c:326  UCX  DEBUG   shared memory mmap(addr=(nil), length=4096) failed: Invalid argument",
    ],
)
def test_ucxs_memlock_advice_warnings_and_debug_are_quiet(line: str) -> None:
    assert acting_verdicts(line, "nccl") == []


def test_a_disks_enospc_in_a_programs_words_stays_storage() -> None:
    assert verdicts("tar: ./ckpt/step_9000.pt: Cannot write: No space left on device", "nccl") == [("storage", "alert")]


# ---- Paddle's NCCL result in its external-error format (parsing/errors.py) ----


@pytest.mark.parametrize(
    ("line", "verdict"),
    [
        ("OSError: (External) NCCL error(2), unhandled system error. ", ("nccl_error", "reattempt")),
        ("  OSError: (External) NCCL error(1), unhandled cuda error.", ("nccl_error", "reattempt")),
        ("OSError: (External) NCCL error(4), invalid argument.", ("user_code", "rollback")),
    ],
)
def test_paddles_nccl_result_is_read_by_its_number_and_text(line: str, verdict: tuple[str, str]) -> None:
    assert verdicts(line, "nccl") == [verdict]


# ---- a YOLO trainer's progress row with NaN loss columns (parsing/nan_lines.py) ----


@pytest.mark.parametrize(
    "line",
    [
        "      12/100      7.41G        nan        nan        nan         31        640:  42%|████▏     | 50/119 [00:21<00:29,  2.37it/s]",
        "      3/50       2.1G      0.0421        nan     0.0188         17        416: 100%|██████████| 88/88 [00:40<00:00,  2.20it/s]",
    ],
)
def test_a_yolo_progress_row_with_a_nan_loss_is_nan_loss(line: str) -> None:
    assert {f for f, _ in verdicts(line, "nccl")} == {"nan_loss"}


@pytest.mark.parametrize(
    "line",
    [
        "      12/100      7.41G      1.104     0.8812      1.201         31        640:  42%|████▏     | 50/119 [00:21<00:29,  2.37it/s]",
        "                 Class     Images  Instances          P          R      mAP50  mAP50-95: 100%|██████████| 4/4 [00:01<00:00,  2.5it/s]",
        "                   all         64        311        nan        nan        nan        nan",
    ],
)
def test_a_finite_row_the_header_and_a_validation_row_are_quiet(line: str) -> None:
    assert acting_verdicts(line, "nccl") == []
