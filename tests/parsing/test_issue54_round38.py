"""Issue 54, round 38 (fresh77 opened, G21): FreeBSD's CAM layer giving up on a disk's command, FreeBSD's pager out of
swap, and the Kubernetes node controller's condition when a kubelet stops posting its status.

Every line is written for the test (other hosts, devices, sizes and times than the corpus rows), beside the healthy
look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import verdicts


def _read(line: str, source: str) -> list[tuple[object, object]]:
    """(fault, action) of each event of ``line`` in ``source``'s stream."""
    return verdicts(line, source)


@pytest.mark.parametrize(
    "line",
    [
        "(da7:mpr1:0:12:0): CAM status: Command timeout",
        "Feb  2 04:41:09 nas2 (ada1:ahcich5:0:0:0): CAM status: Command timeout",
        "Feb  2 04:41:09 nas2 kernel: (ada1:ahcich5:0:0:0): Error 5, Retries exhausted",
        "(da12:mps0:0:20:0): Error 6, Unretryable error",
        "(cd0:ata1:0:0:0): CAM status: Selection timeout",
    ],
)
def test_a_cam_peripheral_giving_up_on_a_command_is_storage(line: str) -> None:
    assert ("storage", "alert") in _read(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "(ada1:ahcich5:0:0:0): Retrying command, 3 more tries remain",
        "(ada1:ahcich5:0:0:0): READ_FPDMA_QUEUED. ACB: 60 08 10 2a 3b 40 00 00 00 00 00 00",
        "(da7:mpr1:0:12:0): Retrying command (per sense data)",
        "cam_periph_error: CAM status: Command timeout was counted 0 times",  # no peripheral designator
    ],
)
def test_a_cam_retry_or_a_command_dump_is_not_storage(line: str) -> None:
    assert "storage" not in [f for f, _ in _read(line, "kernel")]


@pytest.mark.parametrize(
    "line",
    [
        "swap_pager: out of swap space",
        "Jul 19 22:03:17 builder kernel: swap_pager: out of swap space",
        "swap_pager_getswapspace(32): failed",
    ],
)
def test_freebsd_out_of_swap_is_host_oom(line: str) -> None:
    assert ("host_oom", "alert") in _read(line, "kernel")


@pytest.mark.parametrize(
    "line",
    [
        "swap_pager: indefinite wait buffer: bufobj: 0, blkno: 88120, size: 8192",
        "Jul 19 22:00:01 builder kernel: swap_pager: up to date",
    ],
)
def test_a_slow_swap_read_is_not_host_oom(line: str) -> None:
    assert "host_oom" not in [f for f, _ in _read(line, "kernel")]


@pytest.mark.parametrize(
    "line",
    [
        "  Ready            Unknown   Sat, 04 May 2024 08:12:40 +0000   Sat, 04 May 2024 08:13:22 +0000   NodeStatusUnknown"
        "   Kubelet stopped posting node status.",
        "DiskPressure   Unknown   NodeStatusUnknown   Kubelet never posted node status.",
    ],
)
def test_a_node_whose_kubelet_stopped_posting_is_node_silent(line: str) -> None:
    assert ("node_silent", "alert") in _read(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "  Ready            True    Sat, 04 May 2024 08:12:40 +0000   Sat, 04 May 2024 08:02:11 +0000   KubeletReady"
        "   kubelet is posting ready status",
        "  MemoryPressure   False   Sat, 04 May 2024 08:12:40 +0000   Sat, 04 May 2024 08:02:11 +0000"
        "   KubeletHasSufficientMemory   kubelet has sufficient memory available",
    ],
)
def test_a_posting_kubelets_conditions_are_not_node_silent(line: str) -> None:
    assert "node_silent" not in [f for f, _ in _read(line, "nccl")]


@pytest.mark.parametrize(
    "line",
    [
        "libibverbs: Warning: Driver mlx5 does not support the kernel ABI of 3 (supports 1 to 1) for device "
        "/sys/class/infiniband/mlx5_2",
        "libibverbs: Warning: Driver bnxt_re does not support the kernel ABI of 7 (supports 1 to 1) for device "
        "/sys/class/infiniband/rocep129s0f1",
        "libibverbs: Warning: Driver mlx4 does not support the kernel ABI of 4 (supports 1 to 1) for device "
        "/sys/class/infiniband/ibp5s0",
        "libibverbs: Warning: Driver efa does not support the kernel ABI of 2 (supports 1 to 1)",
    ],
)
def test_a_provider_that_cannot_open_its_own_device_is_nic(line: str) -> None:
    assert ("nic", "alert") in _read(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        # a soft-RoCE / soft-iWARP link its administrator named, offered to a hardware provider libibverbs tries first
        "libibverbs: Warning: Driver mlx5 does not support the kernel ABI of 2 (supports 1 to 1) for device "
        "/sys/class/infiniband/rxe_ens3",
        "libibverbs: Warning: Driver cxgb4 does not support the kernel ABI of 1 (supports 2 to 2) for device "
        "/sys/class/infiniband/siw_eth1",
    ],
)
def test_a_provider_offered_another_drivers_device_is_not_nic(line: str) -> None:
    assert "nic" not in [f for f, _ in _read(line, "nccl")]


def test_a_gpu_burn_row_with_a_dead_worker_is_cuda_error() -> None:
    line = (
        "40.0%  proc'd: 9911 (6020 Gflop/s) - -1 (0 Gflop/s) - 9903 (6018 Gflop/s)   errors: 0 - 0  (DIED!)- 0"
        "   temps: 66 C - 41 C - 65 C "
    )
    assert ("cuda_error", "alert") in _read(line, "nccl")


@pytest.mark.parametrize(
    "line",
    [
        "40.0%  proc'd: 9911 (6020 Gflop/s) - 9907 (6019 Gflop/s)   errors: 0 - 0   temps: 66 C - 65 C ",
        "Tested 2 GPUs:",
        "\tGPU 0: OK",
    ],
)
def test_a_gpu_burn_row_of_live_workers_is_not_cuda_error(line: str) -> None:
    assert "cuda_error" not in [f for f, _ in _read(line, "nccl")]
