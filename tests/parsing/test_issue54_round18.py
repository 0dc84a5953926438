"""Issue 54 round 18: fresh batches 29-30 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 18).

The healthy lines that fired first, each quiet by a property of its own, beside the real fault lines of
the same shape that must still act; then the programs' own formats the misses took. Every line is a
corpus row's (tests/fixtures/log_corpus, with its provenance there) or a rule's example.
"""

from __future__ import annotations

import pytest

from faultlens.parsing.timestamps import split_timestamp
from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes

_HEALTHY = [
    # a walk of the PCI capability list for an optional capability that is not there (fresh29)
    (
        "[ 1054.335126] NVRM: Failed to read PCI extended capability header at offset 0x100 while searching for NVIDIA DVSEC3, "
        "rc 0xffffffea",
        "kernel",
    ),
    # torch's pointer to the runtime's documentation, opening its own line under the error (fresh29)
    (
        "Search for `cudaErrorLaunchFailure' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
        "for more information.",
        "nccl",
    ),
    # a CPER memory record's error type that ECC corrects by construction (fresh30)
    ("Sep 15 08:37:28 bak-data-server-112 kernel: {7415}[Hardware Error]:   error_type: 2, single-bit ECC", "kernel"),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the same hint glued after the error's own text is the error's line (a corpus row, gpu_memory)
    (
        "CUDA error: uncorrectable ECC error encountered Search for `cudaErrorECCUncorrectable' in "
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.",
        "nccl",
        "gpu_memory",
    ),
    # the record's multi-bit type and its header still act (the header: fresh1-28 label it kernel)
    ("Sep 15 08:37:28 host kernel: {7415}[Hardware Error]:   error_type: 3, multi-bit ECC", "kernel", "kernel"),
    (
        "Sep 15 08:37:28 bak-data-server-112 kernel: {7415}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0",
        "kernel",
        "kernel",
    ),
    # a capability read that fails with no search for an optional one is the driver's error still
    ("[ 1054.335126] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0xffff:1294)", "kernel", "gpu_lost"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    acting = _acting(line, source)
    assert acting, line
    assert fault in {e.data.get("fault") for e in acting}


_FORMS = [
    # torchrun's record of a worker's abort: user_code by docs/design.md §9, recorded (fresh29, fresh30)
    (
        "E0813 08:21:22.980000 1245483 torch/distributed/elastic/multiprocessing/api.py:984] failed (exitcode: -6) "
        "local_rank: 6 (pid: 1246013) of binary: /usr/bin/python3",
        "nccl",
        "user_code",
    ),
    # Slurm's oom-kill record without slurmstepd's tag, by the step it names
    ("Detected 1 oom-kill event(s) in StepId=22986777.batch", "nccl", "host_oom"),
    # the kernel's own reports: UBSAN and the interrupt line it disables after nobody cared
    ("UBSAN: shift-out-of-bounds in arch/powerpc/mm/ptdump/ptdump.c:282:15", "kernel", "kernel"),
    ("Jun 21 04:29:46 ppp kernel: [ 5193.747710] Disabling IRQ #23", "kernel", "kernel"),
    # a console capture's elapsed clock before the kernel's: the kernel's line under it is read
    ("00h 02m 10.529s(  51ms): [  131.912839] ena: Reg read32 timeout occurred", "kernel", "nic"),
    # SD / eMMC cards are storage
    ("mmc1: Card stuck being busy! __mmc_poll_for_busy", "kernel", "storage"),
    ("[  400.353510] mmc0: timeout waiting for hardware interrupt.", "kernel", "storage"),
    # libata's interrupt status under an exception
    (
        "Mar 28 13:13:29 travira kernel: [  891.865357] ata1.00: irq_stat 0x80000040, connection status changed",
        "kernel",
        "storage",
    ),
    # DataParallel's replica wrapper without the type's module
    ("OutOfMemoryError: Caught OutOfMemoryError in replica 0 on device 0.", "nccl", "user_code"),
    # a tensor of the wrong type or on the wrong device, and the program's own log of that error
    ("RuntimeError: assigned grad has data of a different type", "nccl", "user_code"),
    ("RuntimeError: indices should be either on cpu or on the same device as the indexed tensor (cpu)", "nccl", "user_code"),
    (
        "2026-02-10 15:54:32,757 - __main__ - ERROR - Training failed with error: indices should be either on cpu or on the "
        "same device as the indexed tensor (cpu)",
        "nccl",
        "user_code",
    ),
    # Facebook's oomd
    (
        "Apr 12 20:40:03 seireitei oomd[14628]: [../src/oomd/engine/Ruleset.cpp:112] Running Action=kill_by_memory_size_or_growth",
        "nccl",
        "host_oom",
    ),
    (
        "Apr 12 20:40:03 seireitei oomd[14628]: [../src/oomd/plugins/PressureAbove.cpp:132] 10s pressure 7.08 is over the "
        "threshold of 5 for 5 seconds , total usage is 7345MB",
        "nccl",
        "host_oom",
    ),
    # the kubelet's node conditions and its old eviction message
    ("  Warning  Evicted    <invalid>  kubelet  The node had condition: [DiskPressure].", "nccl", "storage"),
    (
        "W0818 03:35:27.856107    2658 eviction_manager.go:110] Failed to admit pod cadvisor_e2e(ce5092e5) - node has "
        "conditions: %v%!(EXTRA []api.NodeConditionType=[MemoryPressure])",
        "nccl",
        "host_oom",
    ),
    # the CUDA samples' check macro with its file and line
    ("Cuda failure p2pBandwidthLatencyTest.cu:189: 'mapping of buffer object failed'", "nccl", "cuda_error"),
    # NCCL's socket layer and bootstrap, unprefixed after torch's "Last error:"
    (
        "[trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor AF_INET6(10)",
        "nccl",
        "nccl_error",
    ),
    ("[rank0]: Bootstrap : no socket interface found", "nccl", "nccl_error"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _FORMS)
def test_each_programs_own_format_is_read(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source)


def test_a_console_capture_clock_is_taken_off_and_the_kernel_clock_kept() -> None:
    stamped = split_timestamp("00h 02m 10.529s(   0ms): [  131.933268] ena 0000:00:04.0: ena device init failed")
    assert stamped.mono == pytest.approx(131.933268)
    assert stamped.message == "ena 0000:00:04.0: ena device init failed"


def test_a_failed_with_error_line_names_the_program_only_by_its_text() -> None:
    # the same logger's line with a text that names no program mistake stays unjudged
    line = "2026-02-10 15:54:32,757 - __main__ - ERROR - Training failed with error: connection refused"
    assert "user_code" not in _classes(line, "nccl")


def test_a_library_network_error_is_not_user_code() -> None:
    # round 15's decision stands: a library's network failure names no input
    assert "user_code" not in _classes("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='x', port=443)", "nccl")
