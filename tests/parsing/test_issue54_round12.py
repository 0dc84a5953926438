"""Issue 54 round 12: fresh batch 13 mined, every miss and healthy line that fired fixed by its
program's own format (docs/rules.md, round 12), each beside its healthy look-alikes."""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from tests.parsing.line_events import acting as _acting


def _faults(line: str, source: str = "kernel") -> set:
    return {e.data.get("fault") for e in _acting(line, source)}


# --- what cried wolf ------------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "source"), [
    # Ubuntu's gpu-manager at boot, looking for DKMS modules: its own tag, outside the job
    ("Oct 31 01:59:45 ubuntu gpu-manager[934]: Error: can't open /lib/modules/4.15.0-29-generic/updates/dkms", "kernel"),
    # Broadcom's wl driver names its function, not itself
    ("Oct  4 07:55:23 nishtala kernel: [90423.430878] ERROR @wl_notify_scan_status : wlan0 Scan_results error (-22)", "kernel"),
    # slurmctld's restart reading its backup state file (job_mgr.c, node_mgr.c, reservation.c)
    ("[2024-01-31T13:53:45.688] error: NOTE: Trying backup state save file. Jobs may be lost!", "nccl"),
    ("[2024-01-31T13:53:45.689] error: NOTE: Trying backup state save file. Reservations may be lost!", "nccl"),
])
def test_lines_that_cried_wolf_are_recorded(line: str, source: str) -> None:
    assert _acting(line, source) == []


# --- Slurm's controller: silent nodes and a job's memory limit --------------------------------------
@pytest.mark.parametrize(("line", "fault"), [
    ("[2022-06-23T23:44:51.094] error: Nodes cpu15 not responding, setting DOWN", "node_silent"),
    ("[2024-01-31T13:58:45.402] error: Nodes compute[00-03] not responding", "node_silent"),
    ("Jun 19 10:52:24 head slurmctld[1533]: error: Nodes umhpc not responding", "node_silent"),
    ("[2022-06-03T00:39:54.038] _job_complete: JobId=42943 OOM failure", "host_oom"),
])
def test_slurmctld_names_silent_nodes_and_oom_jobs(line: str, fault: str) -> None:
    assert fault in _faults(line, "nccl")


@pytest.mark.parametrize("line", [
    "[2022-06-23T23:50:02.001] Node cpu15 now responding",
    "[2022-06-03T00:39:54.038] _job_complete: JobId=42944 WEXITSTATUS 0",
    "[2022-06-03T00:39:54.038] _job_complete: JobId=42944 done",
    "[2024-01-31T13:53:45.690] Recovered state of 4 nodes",
])
def test_the_controllers_routine_lines_stay_quiet(line: str) -> None:
    assert _acting(line, "nccl") == []


# --- the OOM report's task table --------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "Dec 12 22:37:49 dev kernel: 8038928.137316  pid    uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
    "[ 5213.114001] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
    "[ 5213.114001] [ pid ]   uid  tgid total_vm      rss nr_ptes nr_pmds swapents oom_score_adj name",
])
def test_the_oom_task_table_header_is_an_oom_report(line: str) -> None:
    assert "host_oom" in _faults(line)


def test_the_task_table_folds_into_the_oom_head() -> None:
    p = parser_for("kernel")
    events = p.feed("[ 5213.113990] python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0")
    events += p.feed("[ 5213.114001] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name")
    events += p.flush()
    assert [e.data.get("fault") for e in events] == ["host_oom"]


# --- the program's own errors, by their program's words ----------------------------------------------
@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: Caught OutOfMemoryError in replica 0 on device 0.",
    "torch.cuda.OutOfMemoryError: Caught OutOfMemoryError in replica 1 on device 1.",
    "RuntimeError: Error(s) in loading state_dict for BertForSequenceClassification:",
    "RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
    "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation: "
    "[torch.cuda.FloatTensor [160, 128]] is at version 2; expected version 1 instead.",
    "IndentationError: unindent does not match any outer indentation level",
    "PermissionError: [Errno 13] Permission denied: '/data/xcl_data/ntu/xview/train_data_bone.npy'",
    "wandb.errors.UsageError: Error communicating with wandb process",
    "OSError: [Errno 9] Bad file descriptor",
    "NotFoundError: Key LSTM2/basic_lstm_cell/bias not found in checkpoint",
    "dsacstar_training_with_homography.py: error: the following arguments are required: dataset_name, scene_name",
    "inference.py: error: unrecognized arguments: --tensor_parallel_size 8",
    "train.py: error: argument --lr: invalid float value: 'x'",
    "[08/02/2021-15:12:06] [E] Error[9]: [graph.cpp::computeInputExecutionUses::519] Error Code 9: Internal Error "
    "(Floor_49: IUnaryLayer cannot be used to compute a shape tensor)",
    "F0430 22:47:28.361305 26448 solver.hpp:121] Check failed: 0 == this->param_.momentum() (0 vs. 0.9) Momentum cannot be used with AdaGrad.",
])
def test_the_programs_own_errors_are_user_code(line: str) -> None:
    assert _faults(line, "nccl") == {"user_code"}


@pytest.mark.parametrize(("line", "fault"), [
    # the device, collective and file checks keep their classes: read before the program's own
    ("F0725 01:08:55.576004 10039 syncedmem.cpp:55] Check failed: error == cudaSuccess (4 vs. 0)  unspecified launch failure", "cuda_error"),
    ("F0426 20:35:38.413489 10668 io.cpp:69] Check failed: proto.SerializeToOstream(&output)", "storage"),
    ("F0421 09:02:45.161278  7233 math_functions.cu:52] Check failed: status == CUBLAS_STATUS_SUCCESS (13 vs. 0)  CUBLAS_STATUS_EXECUTION_FAILED",
     "cuda_error"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "user_code"),
    ("OSError: [Errno 28] No space left on device", "storage"),
])
def test_their_neighbours_keep_their_classes(line: str, fault: str) -> None:
    assert fault in _faults(line, "nccl")


@pytest.mark.parametrize("line", [
    # srun's own errors are not argparse's (the Slurm rules read them)
    "usage: train.py [-h] [--lr LR]",
    "[08/02/2021-15:12:06] [W] [TRT] Tensor DataType is determined at build time for tensors not marked as input or output.",
    "I0430 22:47:28.361305 26448 solver.cpp:60] Solver scaffolding done.",
])
def test_their_healthy_look_alikes_stay_quiet(line: str) -> None:
    assert _acting(line, "nccl") == []


# --- fresh14: the kernel's clock with its printk caller id ------------------------------------------
@pytest.mark.parametrize(("line", "message"), [
    ("[  397.261199][   T11] device-mapper: thin: 253:2: switching pool to out-of-data-space (error IO) mode",
     "device-mapper: thin: 253:2: switching pool to out-of-data-space (error IO) mode"),
    ("[  886.706454][T25972] NILFS (loop2): error -4 creating segctord thread", "NILFS (loop2): error -4 creating segctord thread"),
    ("[    5.100000][    C3] watchdog: BUG: soft lockup - CPU#3 stuck for 23s!", "watchdog: BUG: soft lockup - CPU#3 stuck for 23s!"),
])
def test_the_printk_caller_id_goes_with_the_clock(line: str, message: str) -> None:
    from faultlens.parsing.timestamps import split_timestamp

    assert split_timestamp(line).message == message


@pytest.mark.parametrize(("line", "source", "fault"), [
    ("[  397.261199][   T11] device-mapper: thin: 253:2: switching pool to out-of-data-space (error IO) mode", "kernel", "storage"),
    ("[  886.706454][T25972] NILFS (loop2): error -4 creating segctord thread", "kernel", "storage"),
    ("[ 5108.260164] Out of memory and no killable processes...", "kernel", "host_oom"),
    ("[ 914.460690] SError Interrupt on CPU3, code 0xbf000002 -- SError", "kernel", "kernel"),
    ("[ 900.000000] PANIC: double fault, error_code: 0x0", "kernel", "kernel"),
    ("[ 950.947816] pcieport 0000:00:1b.0: DPC: containment event, status:0x1f01 source:0x0000", "kernel", "kernel"),
    ("[  940.380076] mtk_soc_eth 15100000.ethernet eth1: phy link down 2500base-x/Unknown/Unknown/none/off", "kernel", "nic"),
    ("11: [rank11]:[E617 15:17:35.519087787 ProcessGroupNCCL.cpp:695] [Rank 11] To avoid data inconsistency, we are taking the entire process down.",
     "nccl", "nccl_error"),
    ("2024-02-23 23:00:08.992499: E external/xla/xla/service/gpu/nccl_utils.cc:134: NCCL operation ncclGetUniqueId(&id) failed: "
     "Unable to load NCCL library. Multi-GPU collectives will not work.", "nccl", "user_code"),
    ("INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:275: NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled cuda error",
     "nccl", "nccl_error"),
    ("2019-05-09 14:49:11.315396: W tensorflow/core/common_runtime/bfc_allocator.cc:267] Allocator (GPU_0_bfc) ran out of memory trying to "
     "allocate 2.39GiB.  Current allocation summary follows.", "nccl", "user_code"),
])
def test_fresh14_families_by_their_programs_words(line: str, source: str, fault: str) -> None:
    assert fault in _faults(line, source)


@pytest.mark.parametrize(("line", "source"), [
    # firmware_class's missing optional file: the driver falls back to its defaults
    ("Dec 20 21:11:39 gentoo kernel: cxgb4 0031:01:00.4: Direct firmware load for cxgb4/t5-config.txt failed with error -2", "kernel"),
    # a PCIe controller's link, not a network's
    ("[Tue Jan 20 10:17:48 2026] spacemit-pcie 81000000.pcie: spacemit-pcie: link is down after host_init", "kernel"),
    # resource assignment at enumeration
    ("[Tue Jan 20 10:17:47 2026] pci 0000:00:00.0: BAR 0: error updating (0x87ef0000 != 0x80000000)", "kernel"),
    # the allocator's retry note, no failure
    ("2019-05-09 14:49:11.315396: W tensorflow/core/common_runtime/bfc_allocator.cc:237] Allocator (GPU_0_bfc) ran out of memory trying to "
     "allocate 2.39GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean that there could be performance "
     "gains if more memory were available.", "nccl"),
    ("[  940.380076] mtk_soc_eth 15100000.ethernet eth1: phy link up 2500base-x/2.5Gbps/Full/none/rx/tx", "kernel"),
])
def test_fresh14_look_alikes_stay_quiet(line: str, source: str) -> None:
    assert _acting(line, source) == []
