"""Issue 54 round 16: fresh batches 23-26 mined, each fix by the general property or form that
carries, not by the rows' text (docs/rules.md, round 16).

The healthy lines that fired first, each quiet by a property of its own, beside the real fault lines of
the same shape that must still act; then the programs' own formats the misses took. Every line is a
corpus row's (tests/fixtures/log_corpus, with its provenance there) or a rule's example.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes
from tests.parsing.line_events import events as _events

_HEALTHY = [
    # a NIC firmware refusing a request it does not take (invalid params; fresh23), a flow offload refused
    # (the flow stays in software; fresh26), a port that reports no speed to bonding (fresh24)
    ("bnxt_en 0000:21:00.1 ens2f1np1: hwrm req_type 0x53 seq id 0x6fca error 0x2", "kernel"),
    ("bnxt_en 0000:19:00.1 eno2np1: Error: bnxt_tc_add_flow: cookie=0xffff8dace1c88000 error=-22", "kernel"),
    ("Nov 22 09:19:09 truenas kernel: bond1: (slave enp0s5): failed to get link speed/duplex", "kernel"),
    # a process sent SIGTERM, in the Fortran runtime's words: sent, not a fault, and no OOM kill (fresh26)
    ("forrtl: error (78): process killed (SIGTERM)", "nccl"),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # a firmware command that fails, on the RoCE side, is the NIC's (fresh26)
    ("bnxt_en 0000:41:00.0: QPLIB: cmdq[0xd3a]=0x9 status 0x3", "kernel", "nic"),
    # mlx5 failing to load with EINVAL is still the NIC's (development set; its uptime stamp, at boot, dropped)
    ("mlx5_core 0000:03:00.0: mlx5_load_one failed with error code -22", "kernel", "nic"),
    # the Fortran runtime's fatal signal is the program's crash
    ("forrtl: severe (174): SIGSEGV, segmentation fault occurred", "nccl", "user_code"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source)
    assert _acting(line, source)


def test_a_sigterm_in_the_fortran_runtimes_words_is_recorded_as_sent() -> None:
    (event,) = _events("forrtl: error (78): process killed (SIGTERM)", "nccl")
    assert event.kind == "worker_failed" and event.data["signal"] == "SIGTERM"
    assert event.data["fault"] == "unknown" and event.data["action"] == "none"


_TRAINER_FORMS = [
    # NVSHMEM's error macros, any source tree (fresh25: DeepEP, Megatron-Bridge, sglang)
    ("/work/nvshmem_src/src/modules/transport/ibrc/ibrc.cpp:418: non-zero status: 110 ibv_modify_qp failed", "nccl_error"),
    (
        "/dvs/p4/build/sw/rel/gpgpu/toolkit/r12.9/main_nvshmem/src/modules/transport/ibgda/ibgda.cpp:2966: "
        "non-zero status: 7 create DCT share err.",
        "nccl_error",
    ),
    ("/opt/nvshmem/nvshmem/src/modules/transport/ibgda/ibgda.cpp:1889: NULL value cannot allocate mlx5dv_devx_uar", "nccl_error"),
    (
        "/repo/nvshmem_src/src/host/transport/transport.cpp:nvshmemi_transport_init:275: init failed for transport: IBGDA",
        "nccl_error",
    ),
    # the other sticky device-side CUDA failures in NCCL's CUDACHECK and c10's warning (fresh26, fresh23)
    ("E NCCL WARN Cuda failure 'an illegal instruction was encountered'", "cuda_error"),
    ("Warning: CUDA warning: misaligned address (function destroyEvent)", "cuda_error"),
    # UCX's CUDA driver call (fresh25)
    (
        "0: [1579244748.838971] [cgpu12:56309:2]    cuda_ipc_md.c:62   UCX  ERROR cuCtxGetDevice(&cu_device) is failed. "
        "ret:invalid device context",
        "cuda_error",
    ),
    # rlpyt's tabular logger without its closing bar (fresh25)
    ("2022-07-13 11:45:22.240340  | model_loss/Average              nan", "nan_loss"),
    ("2022-07-13 11:45:22.240240  | grad_norm_actor/Average         nan", "nan_loss"),
    # a library's subclass of a builtin user type, torch's compiler refusing, a size the layout cannot divide (fresh23, 25)
    ("omegaconf.errors.ConfigAttributeError: Key '_target_' is not in struct", "user_code"),
    (
        "nemo.collections.llm.api.pretrain/0 [default0]:[rank0]: torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
        "user_code",
    ),
    ("nemo.collections.llm.api.pretrain/0 [default0]:[rank0]: RuntimeError: world_size (1) is not divisible by 2", "user_code"),
    # c10d's watchdog dumping after a collective failed; NCCL's NVLink peers without P2P; the kubelet's disk eviction (fresh26)
    (
        "[rank2]:[E909 08:45:31.916910323 ProcessGroupNCCL.cpp:1589] [PG ID 0 PG GUID 0 Rank 2] ProcessGroupNCCL preparing "
        "to dump debug info. Include stack trace: 1",
        "nccl_error",
    ),
    ("P2P is disabled between NVLINK connected GPUs 1 and 0. This should not be the case given their connectivity.", "nvlink"),
    ("The node was low on resource: ephemeral-storage. Threshold quantity: 24068434671, available: 23201836Ki.", "storage"),
]


_TRAINER_FORMS += [
    # c10's enforce failure after a program's own words is judged as the RuntimeError torch raised (fresh23)
    (
        "2024-08-21 17:43:49,126 WARNING: Save model error: [enforce fail at inline_container.cc:595] . unexpected pos 64 vs 0, "
        "remaining retry times: 0",
        "storage",
    ),
]


def test_another_enforce_failure_after_a_programs_words_is_no_event() -> None:
    assert _events("foo: [enforce fail at tensor_impl.h:100] . some other check", "nccl") == []


@pytest.mark.parametrize(("line", "fault"), _TRAINER_FORMS)
def test_trainer_side_forms(line: str, fault: str) -> None:
    assert fault in _classes(line, "nccl")


def test_an_nvshmem_path_without_a_failure_is_no_event() -> None:
    assert _events("/opt/nvshmem/nvshmem/src/host/init/init.cu:512: NVSHMEM version 3.2.5 initialised", "nccl") == []


def test_an_rl_runs_episode_mean_still_is_no_nan_loss() -> None:
    assert "nan_loss" not in _classes("| ep_rewmean    nan", "nccl")


_KERNEL_FORMS = [
    ('sep 03 13:48:46 <hostname-redacted> kernel: irq 16: nobody cared (try booting with the "irqpoll" option)', "kernel"),
    ("lvm/1318 is leaving the kernel with locks still held!", "kernel"),
    ("KASAN: null-ptr-deref in range [0x0000000000000028-0x000000000000002f]", "kernel"),
    ("[  199.235530] CPU 40 didn't respond to backtrace IPI, inspecting paca.", "kernel"),
    ("SMP: failed to stop secondary CPUs 0-1", "kernel"),
    # the block layer's core warns about its caller: the kernel's bug report, not a disk's (fresh23, fresh25)
    ("WARNING: CPU: 107 PID: 115347 at block/blk-core.c:788 generic_make_request_checks+0x6b4/0x7d0", "kernel"),
    # a storage driver's own WARNING still is storage
    ("[ 1231.038208] WARNING: CPU: 12 PID: 4476 at drivers/nvme/host/pci.c:748 nvme_queue_rq+0x9ed/0xa3c [nvme]", "storage"),
    ("Feb 15 16:09:55 triumph kernel: nfs: task 99 can't get a request slot", "storage"),
    ("Feb 15 16:08:19 triumph amd[601]: file server vim type nfs is down", "storage"),
    ("Sep  3 11:48:39 stark kernel: ATA: abnormal status 0x59 on port 0xEFE7", "storage"),
    ("[  155.366535] nvmet: ctrl 1 keep-alive timer (15 seconds) expired!", "storage"),
    ("[ 5000.1] nvme 0000:01:00.0: Unable to change power state from D3cold to D0, device inaccessible", "storage"),
    (
        "[ 3959.592099] NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:61:00 (printing 1 of every 30).  "
        "The GPU likely needs to be reset.",
        "gpu_reset_required",
    ),
]


@pytest.mark.parametrize(("line", "fault"), _KERNEL_FORMS)
def test_kernel_forms(line: str, fault: str) -> None:
    assert _classes(line, "kernel") == {fault}
