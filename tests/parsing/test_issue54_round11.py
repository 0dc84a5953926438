"""Issue 54 round 11: fresh batches 11 and 12 mined, every miss and healthy line that fired fixed by
its family's general form (docs/rules.md, round 11), each beside its healthy look-alikes."""

from __future__ import annotations

import pytest

from faultlens.parsing.timestamps import split_timestamp
from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import events as _events


def _faults(line: str, source: str = "kernel") -> set:
    return {e.data.get("fault") for e in _events(line, source)}


# --- what cried wolf: the paths that let a healthy line through -------------------------------------
@pytest.mark.parametrize(("line", "mono", "message"), [
    # printk's level before the clock: the clock is the kernel's (the line's level is read off the raw line)
    ("<4>[    3.479290] akm8963: probe of 0-000c failed with error -5", 3.47929, "akm8963: probe of 0-000c failed with error -5"),
    # a syslog line whose clock and host were dropped, its tag kept
    ("kernel: [  731.073998] sof-audio-pci 0000:00:1f.3: error: x", 731.073998, "sof-audio-pci 0000:00:1f.3: error: x"),
])
def test_the_kernels_clock_behind_a_printk_level_or_a_bare_tag(line: str, mono: float, message: str) -> None:
    st = split_timestamp(line)
    assert st.mono == mono and st.message == message


@pytest.mark.parametrize("line", [
    # an unknown driver's probe at boot: no longer read by the model as a NIC's (its clock was not read)
    "<4>[    3.479290] akm8963: probe of 0-000c failed with error -5",
    # the sound subsystem's, outside the job: its table entry, no longer the model's guess
    "kernel: [  731.073998] sof-audio-pci 0000:00:1f.3: error: status = 0x00000000 panic = 0x00000000",
    # the lockup detector's set-up on a guest without a PMU (kernel/watchdog_perf.c)
    "May 11 16:21:46 ip-172-31-28-216 kernel: NMI watchdog: Perf event create on CPU 0 failed with -2",
])
def test_lines_that_cried_wolf_are_recorded(line: str) -> None:
    assert _acting(line) == []


@pytest.mark.parametrize("line", [
    "[ 2000.123456] watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [python:1234]",
    "[ 2000.123456] NMI watchdog: Watchdog detected hard LOCKUP on cpu 3",
    "<3>[  300.479290] nvme nvme0: I/O 12 QID 3 timeout, aborting",
])
def test_the_faults_beside_them_still_act(line: str) -> None:
    assert _acting(line)


# --- NICs: a link going down in each driver's words -----------------------------------------------
@pytest.mark.parametrize("line", [
    "[  147.079298] r8169 0000:03:00.0 enp3s0: Link is Down",  # phylib phy_print_status (netdev_info)
    "Jul  9 09:52:20 techo2-PC kernel: [ 138.285342] r8169 0000:02:00.0 enp2s0: link down",  # r8169's own
    "Jul 20 21:12:13 kernel: igb1: link state changed to DOWN",  # FreeBSD sys/net/if.c
])
def test_a_link_down_in_each_drivers_words(line: str) -> None:
    got = _acting(line)
    assert [(e.kind, e.data["fault"]) for e in got] == [("link_down", "nic")], got


@pytest.mark.parametrize("line", [
    "Jul 20 21:12:13 kernel: igb1: link state changed to UP",
    "[  147.079298] r8169 0000:03:00.0 enp3s0: Link is Up - 1Gbps/Full - flow control rx/tx",
    "[  147.079298] r8169 0000:03:00.0 enp3s0: link is not ready",
])
def test_a_link_coming_up_stays_quiet(line: str) -> None:
    assert _acting(line) == []


# --- CUDA failures in older frameworks' checks ----------------------------------------------------
@pytest.mark.parametrize(("line", "fault"), [
    ("F0311 02:01:35.163677  6921 benchmark.cpp:92] Check failed: error == cudaSuccess (74 vs. 0)  misaligned address", "cuda_error"),
    ("F0903 14:31:26.106397 92421 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out of memory", "user_code"),
    ("mxnet.base.MXNetError: [17:13:00] src/operator/nn/./../mxnet_op.h:576: Check failed: err == cudaSuccess (2 vs. 0) Name: mxnet_generic_kernel ErrStr:out of memory", "user_code"),
    ("THCudaCheck FAIL file=/pytorch/torch/lib/THC/generic/THCStorage.cu line=58 error=2 : out of memory", "user_code"),
    ("THCudaCheck FAIL file=/opt/conda/work/aten/src/THC/generic/THCStorage.cpp line=36 error=6 : the launch timed out and was terminated", "cuda_error"),
    ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=265 error=59 : device-side assert triggered", "user_code"),
    ("/opt/conda/work/torch/lib/THCUNN/SpatialClassNLLCriterion.cu:40: void cunn_kernel(T *) [with T = float]: block: [0,0,0], thread: [49,0,0] Assertion `t >= 0 && t < n_classes` failed.", "user_code"),
    ("darknet: ./src/cuda.c:36: check_error: Assertion `0' failed.", "cuda_error"),
    ("CUDA Error: unknown error", "cuda_error"),
    ("2023-11-01 16:19:17.812101: E tensorflow/compiler/xla/stream_executor/rocm/rocm_driver.cc:606] failed to allocate 127.99TiB (140729850295296 bytes) from device: HIP_ERROR_OutOfMemory", "user_code"),
    ("EZ9999  Kernel task happen error, retCode=0x26, [aicore exception].[FUNC:PreCheckTaskErr][FILE:task_info.cc][LINE:1518]", "cuda_error"),
    ("Exception in main training loop: Out of memory allocating 25,600,000 bytes (allocated so far: 3,635,267,072 bytes).", "user_code"),
    ("RuntimeError: CudaNdarray_ZEROS: allocation failed.", "user_code"),
])
def test_device_failures_in_each_frameworks_check(line: str, fault: str) -> None:
    assert fault in _faults(line, "nccl")


@pytest.mark.parametrize("line", [
    "I0311 02:01:35.163677  6921 benchmark.cpp:92] Check failed: none, cudaSuccess everywhere",
])
def test_their_look_alikes_are_not_cuda_errors(line: str) -> None:
    assert not ({"cuda_error", "user_code"} & _faults(line, "nccl"))


def test_a_host_assert_outside_cuda_code_is_the_programs_not_cudas() -> None:
    # round 14 (parsing/rules.toml app.assert_failed): the program's own assert() that failed is user_code
    assert _faults("python: ./src/main.c:12: main: Assertion `x > 0' failed.", "nccl") == {"user_code"}


# --- collectives other than NCCL's ----------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "tensorflow.python.framework.errors_impl.UnknownError: ncclCommInitRank failed: unhandled system error",
    "F0524 10:00:00.000000  1234 parallel.cpp:88] Check failed: result == ncclSuccess (2 vs. 0)  unhandled system error",
    "HorovodBroadcast_fully_connected_weights_0 [missing ranks: 0]",
    "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds.",
    "[1,0]<stderr>:Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution.",
    "2022-11-15 16:03:15.140058: E external/org_tensorflow/tensorflow/core/distributed_runtime/coordination/coordination_service.cc:954] /job:jax_worker/replica:0/task:37 has been set to ERROR in coordination service: UNAVAILABLE: Task /job:jax_worker/replica:0/task:37 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly.",
])
def test_other_collectives_failures_are_the_collectives(line: str) -> None:
    assert "nccl_error" in _faults(line, "nccl")


@pytest.mark.parametrize("line", [
    "[1,0]<stdout>:Horovod initialized with 8 ranks",
    "I1115 16:03:15.140058 coordination_service.cc:600] Task /job:jax_worker/replica:0/task:37 connected",
])
def test_their_healthy_lines_stay_quiet(line: str) -> None:
    assert _acting(line, "nccl") == []


# --- NaN where the logger prints a step's numbers -------------------------------------------------
@pytest.mark.parametrize("line", [
    "| loss          | nan       |",
    "| mse           | nan       |",
    "E Nan in summary histogram for: lstm_fused_cell/kernel_0",
    "2000      [nan]         [nan]         [nan]",
])
def test_a_logged_nan(line: str) -> None:
    assert "nan_loss" in _faults(line, "nccl")


@pytest.mark.parametrize("line", [
    "| loss          | 0.123     |",
    "| ep_rewmean    | nan       |",  # an RL run's episode mean: NaN until an episode ends
    "| nan_count     | 0         |",
    "1000      [1.23e-03]    [1.10e-03]    []",
])
def test_logged_numbers_that_are_not_a_nan_loss(line: str) -> None:
    assert _acting(line, "nccl") == []


# --- the kernel's own checks ------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "acts"), [
    ("Dec 28 08:02:31 YGH_Linux kernel: WARNING: at kernel/rh_taint.c:13 mark_hardware_unsupported+0x39/0x40() (Not tainted)", True),
    ("[  296.623194] WARNING: CPU: 0 PID: 1 at drivers/base/devres.c:526 devres_release_all+0xe/0x50", True),
    ("[ 2953.689354] BUG zio_cache (Tainted: P           OE  ------------  ): Objects remaining in zio_cache on kmem_cache_close()", True),
    # a driver outside the job, a boot-time W+X check: the kernel's class, recorded
    ("[ 5000.123456] WARNING: CPU: 3 PID: 7 at drivers/gpu/drm/i915/display/intel_tc.c:736 tgl_tc_phy_init+0xec/0x120 [i915]", False),
    ("[ 5000.123456] WARNING: CPU: 3 PID: 7 at drivers/net/wireless/intel/iwlwifi/pcie/trans.c:100 x+0x1/0x2", False),
    ("Dec 20 07:01:50 localhost kernel: x86/mm: Checked W+X mappings: FAILED, 3 W+X pages found.", False),
])
def test_kernel_warnings_and_checks_are_the_kernels(line: str, acts: bool) -> None:
    assert "kernel" in _faults(line)
    assert bool(_acting(line)) == acts


@pytest.mark.parametrize(("line", "fault"), [
    # the storage and NIC WARNING rules still come first; the NFS server's legacy tracking stays benign
    ("[ 5000.123456] WARNING: CPU: 3 PID: 7 at drivers/nvme/host/core.c:100 nvme_x+0x1/0x2", "storage"),
    ("[16616.450215] WARNING: CPU: 15 PID: 37722 at drivers/net/ethernet/intel/igc/igc_main.c:6197 igc_rd32+0xaf/0xc0 [igc]", "nic"),
])
def test_device_warnings_keep_their_devices_class(line: str, fault: str) -> None:
    assert _faults(line) == {fault}


# --- clock, storage, memory by their programs' formats -------------------------------------------
@pytest.mark.parametrize(("line", "source", "fault"), [
    ("[  300.152000] Measured 171222 cycles TSC warp between CPUs, turning off TSC clock.", "kernel", "clock_skew"),
    ("Apr 13 12:27:10 pi2 systemd-timesyncd[227]: System clock time unset or jumped backwards, restoring from recorded timestamp: Sun 2018-04-15 09:20:21 AEST", "kernel", "clock_skew"),
    ("make[1]: warning:  Clock skew detected.  Your build may be incomplete.", "nccl", "clock_skew"),
    ("make[1]: Warning: File 'recorder' has modification time 69 s in the future", "nccl", "clock_skew"),
    ("tar: data/x.bin: time stamp 2026-11-30 10:00:00 is 86399.5 s in the future", "nccl", "clock_skew"),
    ("md0 : active raid1 sdb1[1] sda1[0](F)", "kernel", "storage"),
    ("F0426 20:35:38.413489 10668 io.cpp:69] Check failed: proto.SerializeToOstream(&output)", "nccl", "storage"),
    ("Jun 30 20:18:15 instance-1 kernel: [2687694.642439] oom kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=python,pid=11241,uid=1001", "kernel", "host_oom"),
    ("kernel: gim warning:(wait_cmd_complete:1671) GFX engine hang detected", "kernel", "gpu_reset_required"),
])
def test_each_programs_own_format(line: str, source: str, fault: str) -> None:
    got = _acting(line, source)
    assert got and got[0].data["fault"] == fault, got


@pytest.mark.parametrize(("line", "source"), [
    ("md0 : active raid1 sdb1[1] sda1[0]", "kernel"),
    ("md1 : active raid5 sdd1[3](S) sdc1[2] sdb1[1] sda1[0]", "kernel"),  # a spare is no fault
    ("make[1]: Leaving directory '/build'", "nccl"),
    ("[  300.152000] clocksource: Switched to clocksource tsc", "kernel"),
    ("Apr 13 12:27:10 pi2 systemd-timesyncd[227]: Synchronized to time server 10.0.0.1:123 (ntp.ubuntu.com).", "kernel"),
])
def test_their_healthy_look_alikes(line: str, source: str) -> None:
    assert _acting(line, source) == []
