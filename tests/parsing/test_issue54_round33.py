"""Issue 54, round 33 (fresh72 opened, G16): a scheduler's member gone silent, a program's call to its runtime's
abort, NVML's "GPU is lost" after any call's description, and the GPU allocator's out-of-memory and missing-binary
errors by their names in every API's spelling.

Every line is written for the test (other members, hosts, ids and numbers than the corpus rows), beside the
healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting_verdicts


def _acting(line: str, source: str = "nccl") -> list[tuple[object, object]]:
    """(fault, action) of each event of ``line`` that acts (the job's stream unless told)."""
    return acting_verdicts(line, source)


@pytest.mark.parametrize(
    "line",
    [
        # a member whose heartbeats timed out or expired, named before or after the heartbeat
        "24/07/09 03:12:44 ERROR TaskSchedulerImpl: Lost executor 31 on worker-17.cluster.local: Executor heartbeat timed out after 180412 ms",
        "java.util.concurrent.TimeoutException: Heartbeat of TaskManager with id 10.2.0.9:41233-b77e01 timed out.",
        "2024-07-09 03:12:44,120 WARN  ResourceManager - Heartbeat of worker container_0042 timed out.",
        "    2024/07/09 03:12:44.551201 [WARN] scheduler.heartbeat: node 'a1b2c3d4-0000-1111-2222-333344445555' TTL expired",
        # removed with no recent heartbeats
        "24/07/09 03:12:44 WARN HeartbeatReceiver: Removing executor 5 with no recent heartbeats: 200001 ms exceeds timeout 120000 ms",
        # lost by the scheduler, for a reason other than memory
        "24/07/09 03:12:44 ERROR YarnScheduler: Lost executor 2 on gpu-node-3: Remote RPC client disassociated. Likely due to network issues.",
    ],
)
def test_a_scheduler_member_gone_silent_is_node_silent(line: str) -> None:
    assert _acting(line) == [("node_silent", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        # a heartbeat timer of no member (raft's election), a lagging heartbeat that hedges, a member lost at INFO
        '2024/07/09 03:12:44 [WARN] raft: Heartbeat timeout from "" reached, starting election',
        "[2024-07-09 03:12:44,907 W 12 40] node_manager.cc:157: Last heartbeat was sent 7001 ms ago. If heartbeat keeps lagging, this node can be marked as dead mistakenly.",
        "24/07/09 03:12:44 INFO DAGScheduler: Executor lost: 31 (epoch 2)",
        "2024-07-09 03:12:44 INFO Configuring worker heartbeat: shutdown_mode: WAIT_FOR_COORDINATOR",
    ],
)
def test_heartbeat_words_without_a_silent_member_stay_quiet(line: str) -> None:
    assert ("node_silent", "alert") not in _acting(line)


def test_a_member_lost_to_a_memory_kill_is_not_read_as_silent() -> None:
    line = "24/07/09 03:12:44 ERROR YarnScheduler: Lost executor 7 on gpu-node-3: Container killed by YARN for exceeding memory limits."
    assert ("node_silent", "alert") not in _acting(line)


@pytest.mark.parametrize(
    "line",
    [
        "Abort(3) on node 2 (rank 2 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 3) - process 2",
        "17: MPICH ERROR [Rank 17] [job id 9912.0] [nid000123] - Abort(2) (rank 17 in comm 0): application called MPI_Abort(comm=0x84000000, 2) - process 17",
        "------------- Processor 3 Exiting: Called CmiAbort ------------",
    ],
)
def test_a_runtime_reporting_the_programs_abort_call_is_user_code(line: str) -> None:
    assert _acting(line) == [("user_code", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        "If the solver called MPI_Abort, check its return code before restarting",  # a hedge before the call
        "Note: invoking MPI_Abort causes all processes to exit",  # no call reported
    ],
)
def test_an_abort_call_in_advice_stays_quiet(line: str) -> None:
    assert ("user_code", "alert") not in _acting(line)


@pytest.mark.parametrize(
    "line",
    [
        "2024.07.09:03:12:44.551: monitor GPU5: unable to get power usage - GPU is lost (15)",
        "Failed to read clocks of GPU 0000:41:00.0: GPU is lost",
    ],
)
def test_nvmls_gpu_is_lost_after_any_calls_description_is_gpu_lost(line: str) -> None:
    assert _acting(line) == [("gpu_lost", "alert")]


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        # the driver API's name of "no kernel image for this device": the program's build
        ("cuModuleLoad: CUDA_ERROR_NO_BINARY_FOR_GPU", "user_code"),
        # the runtime's name of a device allocation that found no memory
        ("terminate called: cudaMallocPitch( &ptr, &pitch, w, h ) error( cudaErrorMemoryAllocation): out of memory", "user_code"),
        # a binding raising Python's MemoryError for the GPU allocator's call
        ("MemoryError: cuMemAlloc failed: out of memory", "user_code"),
        ("MemoryError: hipMalloc failed: out of memory", "user_code"),
        # the same type for host memory, and the pinned-host allocator, stay the host's
        ("MemoryError: Unable to allocate 12.0 GiB for an array with shape (40000, 40000) and data type float64", "host_oom"),
        ("MemoryError: cuMemAllocHost failed: out of memory", "host_oom"),
        # a CUDA error of another name stays the runtime's
        ("cuModuleLoad: CUDA_ERROR_LAUNCH_FAILED", "cuda_error"),
    ],
)
def test_a_gpu_errors_name_gives_its_class_in_any_spelling(line: str, fault: str) -> None:
    assert [f for f, _ in _acting(line)] == [fault]


@pytest.mark.parametrize(
    "line",
    [
        "* Device #3: Kernel ./OpenCL/m17200-pure.cl build failed.",
        "Program kernels/reduce.cu compilation failed",
        "ptxas error   : Entry function '_Z4scanPfi' uses too much shared data (0xd000 bytes, 0xc000 max)",
    ],
)
def test_a_gpu_kernel_that_cannot_be_built_is_user_code(line: str) -> None:
    assert _acting(line) == [("user_code", "rollback")]


@pytest.mark.parametrize(
    "line",
    [
        "Docker image build failed",  # no kernel source named
        "ptxas info    : Used 40 registers, 8192 bytes smem, 400 bytes cmem[0]",  # the assembler's report, no limit passed
    ],
)
def test_other_builds_and_the_assemblers_report_are_not_read_as_a_kernel_build(line: str) -> None:
    assert ("user_code", "rollback") not in _acting(line)


@pytest.mark.parametrize(
    ("line", "acts"),
    [
        # DRBD 9's prefix (resource/volume, minor, peer): an unresolved split brain, and the peer lost as before
        ("[ 4711.000123] drbd data/0 drbd3 store-b: Split-Brain detected but unresolved, dropping connection!", True),
        ("[ 4711.000123] drbd data/0 drbd3 store-b: PingAck did not arrive in time.", True),
        # a split brain its after-sb policy solved
        (
            "[ 4711.000123] drbd data/0 drbd3 store-b: Split-Brain detected, 1 primaries, automatically solved. Sync from this node",
            False,
        ),
    ],
)
def test_drbds_unresolved_split_brain_is_storage(line: str, acts: bool) -> None:
    assert (_acting(line, "kernel") == [("storage", "alert")]) is acts


@pytest.mark.parametrize(
    "line",
    [
        # earlyoom's older report (no uid, badness), its kill by signal, systemd-oomd's trigger and kill
        'sending SIGTERM to process 31337 "torchrun": badness 812, VmRSS 60211 MiB',
        'killing process 31337 "torchrun" with signal 9: badness 812, VmRSS 60211 MiB',
        "Mar 02 11:40:07 gpu-4 systemd-oomd[611]: Memory pressure for /system.slice/job.slice is 81.02% > 60.00% for > 20s with reclaim activity",
        "Mar 02 11:40:07 gpu-4 systemd-oomd[611]: oomd attempting to kill 4242 with KILL",
    ],
)
def test_a_user_space_oom_killers_kill_is_host_oom(line: str) -> None:
    assert _acting(line) == [("host_oom", "alert")]


@pytest.mark.parametrize(
    ("line", "acts"),
    [
        ("gpu-node-12   NotReady   <none>   41d   v1.27.3", True),
        ("gpu-node-12   NotReady,SchedulingDisabled   worker   41d   v1.27.3", True),
        ("10.0.0.9   NotReady   2d       v1.8.0", True),  # an older kubectl: no ROLES column
        ("gpu-node-12   Ready   <none>   41d   v1.27.3", False),  # the table's healthy row
        ("the node went NotReady twice in 41d on v1.27.3", False),  # a sentence, not the table's row
    ],
)
def test_kubectl_get_nodes_row_that_says_not_ready_is_node_silent(line: str, acts: bool) -> None:
    assert (_acting(line) == [("node_silent", "alert")]) is acts
