"""Issue 54 round 17: fresh batches 27-28 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 17); and docs/design.md §9's rule for a process's end.

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
    # c10d's store client at warning level, retrying until its timeout (fresh27: workers up before the master)
    (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to [d-5QMM9N3.corp.leidos.com]:29500 "
        "(system error: 10049 - The requested address is not valid in its context.).",
        "nccl",
    ),
    (
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [localhost]:12345 (errno: 101 - Network is unreachable).",
        "nccl",
    ),
    # a memory controller's EDAC driver finding ECC off and declining to load: a setting, at any clock (fresh28, fresh11)
    ("Nov 28 16:33:12 Yak kernel: EDAC sbridge: ECC is disabled. Aborting", "kernel"),
    ("Sep  1 10:00:00 host kernel: EDAC amd64: Node 0: DRAM ECC disabled.", "kernel"),
]
# (round 45) the IOMMU's page fault naming a device by its address alone is no longer quiet: an IOMMU's DMA fault is
# kernel, an alert, unless logged at boot (tests/parsing/test_issue54_round45.py)


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the store client's timeout is what gives up (the development set's row)
    (
        "[E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying to connect to 192.0.0.1:1234",
        "nccl",
        "nccl_error",
    ),
    # a machine check in the EDAC driver's words still acts
    (
        "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#0 (channel:0 slot:0 page:0x0 offset:0x0)",
        "kernel",
        "kernel",
    ),
    # behind a NIC driver's tag the IOMMU's page fault still acts (fresh28); since round 45 as the IOMMU's, kernel
    (
        "kernel: ice 0000:c7:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x002b address=0x4000180000 flags=0x0020]",
        "kernel",
        "kernel",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    assert fault in {e.data.get("fault") for e in _acting(line, source)}


# --- docs/design.md §9, round 17: a process's death in the job's output is the program's, whoever prints it ----
_DEATHS = [
    ("  traceback : Signal 11 (SIGSEGV) received by PID 6175", "user_code"),  # torchrun's summary (fresh28)
    ("traceback : Signal 6 (SIGABRT) received by PID 3016739", "user_code"),  # torchrun records an abort (fresh28)
    ("srun: error: frontier002: task 0: Aborted", "user_code"),  # Slurm (fresh17)
    ("srun: error: cgpu12: task 0: Segmentation fault", "user_code"),  # Slurm (fresh25)
    ("Process finished with exit code 139 (interrupted by signal 11: SIGSEGV)", "user_code"),  # an IDE (fresh2)
    ("segmentation fault (core dumped)  python train.py --config x.yaml", "user_code"),  # zsh
    ("Fatal Python error: Segmentation fault", "user_code"),  # the process's own handler
]


@pytest.mark.parametrize(("line", "fault"), _DEATHS)
def test_a_death_in_the_jobs_output_is_the_programs_whoever_prints_it(line: str, fault: str) -> None:
    assert _classes(line, "nccl") == {fault}


def test_the_machines_own_record_of_a_crash_is_app_fault_and_a_gpu_library_makes_it_theirs() -> None:
    # the kernel's trap line (fresh1, fresh11): the OS's record, recorded
    trap = "kernel: [920575.093899] traps: openarc[9640] general protection ip:55ff9fed033f sp:7f533f9ad240 error:0 in openarc[55ff9fec5000+13000]"
    assert _classes(trap) == {"app_fault"}
    assert _acting(trap) == []
    # inside libcuda the driver on this machine is suspect, whoever records it (fresh17)
    libcuda = (
        "[168766.855073] traps: avg-pool-1d.exe[50451] general protection fault ip:7894f2545f88 sp:7ffdf13a3150 error:0 in "
        "libcuda.so.595.71.05[345f88,7894f2364000+10fc0"
    )
    assert _classes(libcuda) == {"cuda_error"}


_BUILDS = [
    # a build that lacks code for the device: user_code whatever framework reports it (fresh20, fresh21, fresh25)
    "jaxlib.xla_extension.XlaRuntimeError: UNKNOWN: no kernel image is available for execution on the device",
    "CUDA error: no kernel image is available for execution on the device",
    "(MegatronTrainRayActor pid=228664) [2025-12-13 03:21:03] e54db9740f9d:228664:229081 [1] enqueue.cc:42 NCCL WARN Cuda failure "
    "'named symbol not found'",
]


@pytest.mark.parametrize("line", _BUILDS)
def test_a_build_without_code_for_the_device_is_user_code(line: str) -> None:
    assert _classes(line, "nccl") == {"user_code"}


# --- the programs' own formats ---------------------------------------------------------------------------------
_TRAINER = [
    ("WARNING:root:grad_norm became NaN. Stopping training.", "nan_loss"),  # fresh27
    ("[rank1]: RuntimeError: Error building extension 'cpu_adam'", "user_code"),  # fresh27
    ("[rank1]: RuntimeError: Tensors must have same number of dimensions: got 2 and 3", "user_code"),  # fresh27
    ("Failed to modify QP 100 to RTR", "nccl_error"),  # fresh28
    ("ERROR: LoadError: This line of code cannot be reached", "user_code"),  # fresh28 (Julia)
    (
        "python: can't open file '/home/xulei/xulei/dataset-distillation/Epilepsy/utils/preprocess.py': [Errno 2] No such file or directory",
        "user_code",
    ),
]


@pytest.mark.parametrize(("line", "fault"), _TRAINER)
def test_trainer_side_forms(line: str, fault: str) -> None:
    assert fault in _classes(line, "nccl")


def test_a_learning_rate_that_became_nan_is_no_nan_loss() -> None:
    # the sentence form names a loss or a gradient norm, nothing else a program prints as NaN
    assert "nan_loss" not in _classes("scheduler: the learning rate became nan", "nccl")


_KERNEL = [
    ("[  144.148275] core: [Hardware Error]: Machine check: Processor context corrupt", "kernel"),  # fresh27
    ("Oct 12 19:00:20 aks-nodepool1-24207654-vmss000001 systemd[1]: cri-containerd-25a38b5b8d556d7983d975577f5ac75ebbcfb4b269e6deaa0a0440c1ffc969ca.scope: "
     "A process of this unit has been killed by the OOM killer.", "host_oom"),  # fresh27
    ("[ 47.346221] [ENA_COM: ena_com_dev_reset] Reg read32 timeout occurred", "nic"),  # fresh27
    ("2011-02-27t22:12:32.991459: [4256996.991459] LustreError: 11-0: an error occurred while communicating with 172.31.32.5@tcp. "
     "The mds_close operation failed with -116", "storage"),  # fresh27: an ISO stamp with a lowercase t and a colon
    ("[  787.068313] refcount_t: underflow; use-after-free.", "kernel"),  # fresh28
]  # fmt: skip


@pytest.mark.parametrize(("line", "fault"), _KERNEL)
def test_kernel_forms(line: str, fault: str) -> None:
    assert fault in _classes(line)


def test_a_machine_check_after_another_modules_prefix_is_uncorrected_and_ghes_stays_the_firmwares() -> None:
    [e] = _events("core: [Hardware Error]: Machine check: Processor context corrupt")
    assert (e.kind, e.data["fault"], e.data["action"]) == ("mce", "kernel", "evict")
    # the firmware's GHES records keep their own reading (not the mce kind)
    assert all(e.kind != "mce" for e in _events("{1}[Hardware Error]: event severity: fatal"))


def test_an_ena_refusal_of_a_feature_is_no_timeout() -> None:
    assert _acting("[18512.772641] [ENA_COM: ena_com_set_hash_function] Feature 10 isn't supported") == []


# --- a program's end in its launcher's or shell's words, by docs/design.md §9: user_code, recorded ----------------
_RECORDED_ENDS = [
    "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD",  # Open MPI: the program called MPI_Abort
    "/bin/bash: line 1: python: command not found",  # the job's command names no program (exit 127)
    "/bin/sh: 1: torchrun: not found",
    "/var/spool/slurmd/job123/slurm_script: line 5: torchrun: command not found",
]


@pytest.mark.parametrize("line", _RECORDED_ENDS)
def test_a_programs_end_in_its_launchers_words_is_user_code_and_recorded(line: str) -> None:
    assert _classes(line, "nccl") == {"user_code"}
    assert _acting(line, "nccl") == []  # the error printed before it, or what follows, decides


def test_other_things_not_found_are_no_command_not_found() -> None:
    assert _events("Epoch 1: loss not found in metrics", "nccl") == []
