"""Issue 54 round 20: fresh batches 33-34 mined, each fix by the general property or form that carries,
not by the rows' text (docs/rules.md, round 20).

The healthy lines that fired first, each quiet by a property of its own, beside the real fault lines of
the same shape that must still act; then the programs' own formats the misses took. Every line is a corpus
row's (tests/fixtures/log_corpus, with its provenance there) or a rule's example, unless its comment says it
is the same shape with one word changed.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting as _acting
from tests.parsing.line_events import classes as _classes

_HEALTHY = [
    # a bit of AER's Correctable Error Status register, by the kernel's name for it, under a driver's tag (fresh33)
    ("[54912.661219] igc 0000:2b:00.0:    [12] Timeout", "kernel"),
    ("[54912.661211] igc 0000:2b:00.0:    [ 8] Rollover", "kernel"),
    ("[ 1773.436401] pcieport 0000:00:1b.4:    [ 0] Receiver Error         (First)", "kernel"),
    # mlx5_ib's dump routine announcing the raw completion after the error line (fresh33)
    ("[  408.380181] infiniband mlx5_0: dump_cqe:272:(pid 0): dump error cqe", "kernel"),
    # an NCCL lookup under a setting left unset: the default applies (fresh33)
    (
        "A100:5591:5591 [3] misc/cudawrap.cc:90 NCCL WARN Failed to find CUDA library in (null) (NCCL_CUDA_PATH=(null))",
        "nccl",
    ),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY)
def test_a_healthy_line_is_quiet_by_its_own_property(line: str, source: str) -> None:
    assert _acting(line, source) == []


_STILL_FAULTS = [
    # the same lookup under a path someone gave (the value changed): NCCL's WARN acts
    (
        "A100:5591:5591 [3] misc/cudawrap.cc:90 NCCL WARN Failed to find CUDA library in /opt/cuda (NCCL_CUDA_PATH=/opt/cuda)",
        "nccl",
        "nccl_error",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_FAULTS)
def test_the_same_shapes_that_are_faults_still_act(line: str, source: str, fault: str) -> None:
    acting = _acting(line, source)
    assert acting, line
    assert fault in {e.data.get("fault") for e in acting}


def test_a_status_bit_line_keeps_its_class_and_the_header_acts() -> None:
    # the bit line is recorded as the record's detail (a development-set row); the header that states the severity acts
    assert _classes("[74889.542184] pcieport 0000:00:02.0:    [ 5] Surprise Down Error    (First)") == {"kernel"}
    header = "[  535.561556] igen6_edac 0000:ed:01.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, (Unregistered Agent ID)"
    assert _acting(header, "kernel")


def test_the_error_cqe_line_before_the_dump_still_acts() -> None:
    line = "[  408.372201] infiniband mlx5_0: mlx5_handle_error_cqe:332:(pid 0): WC error: 4, Message: local protection error"
    assert _acting(line, "kernel")


_FORMS = [
    # util-linux dmesg's printk caller id after a space is taken off with the clock (fresh33)
    ("[ 2491.403032] [    T240] igc 0000:6d:00.0 enp109s0: PCIe link lost, device now detached", "kernel", "nic"),
    # a driver that could not get what its device needs, or a device operation that never finished (fresh33)
    ("[   41.498705] ena 0000:00:03.0: Can not reserve msix vectors", "kernel", "nic"),
    ("[  704.844232] e1000e 0000:00:1f.6 eno1: MDI Write did not complete", "kernel", "nic"),
    (
        "Aug 27 01:34:35 ubuntu kernel: [    7.187857] mpt3sas_cm0: unable to map adapter memory!  or resource not found",
        "kernel",
        "storage",
    ),
    # a device number the allocation does not hold: the program's, on every machine (docs/design.md §9)
    (
        "[2026-04-18 12:45:41] gpu002:704798:704908 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 101 'invalid device ordinal'",
        "nccl",
        "user_code",
    ),
    # a network plugin's WARN in its own logger's format (aws-ofi-nccl before 1.0, behind pdsh's host) (fresh34)
    ("10.3.35.83: WARN: Function: find_ofi_provider Line: 543: NET/OFI Couldn't find any optimal provider", "nccl", "nccl_error"),
    ("10.3.35.83: WARN: Function: main Line: 66: NET/OFI OFI NCCL failure: 2", "nccl", "nccl_error"),
    # Paddle's enforce type, and ncclGetErrorString's text thrown from the framework's NCCL helper (fresh33)
    (
        "paddle.fluid.core.EnforceNotMet: unhandled cuda error at [/workspace/agent/work/62dea99fa81a5ba4/paddle/fluid/platform/"
        "nccl_helper.h:93]",
        "nccl",
        "nccl_error",
    ),
    # a program's own "<what> error: <text>" with torch's argument parser's refusal (fresh33)
    (
        "2025-11-10 21:45:45,378 - WARNING - Training batch error: full() received an invalid combination of arguments - got "
        "(tuple, str, device=torch.device, dtype=torch.dtype), but expected one of:",
        "nccl",
        "user_code",
    ),
    # the kernel's record of a verbs completion in error (the completion convention), interface scripts finding no device,
    # a SAS HBA's firmware fault state, an FC port's cable out (fresh33, fresh34; rules.toml's examples)
    (
        "infiniband mlx5_0: mlx5_handle_error_cqe:332:(pid 0): WC error: 4, Message: local protection error",
        "kernel",
        "nccl_error",
    ),
    (
        "Mar 18 10:29:53 node-9.domain.tld /etc/sysconfig/network-scripts/ifup-eth[4014]: Device ib0 does not seem to be present, "
        "delaying initialization.",
        "kernel",
        "nic",
    ),
    ("[  225.514159] mpt3sas_cm0: fault_state(0x5854)!", "kernel", "storage"),
    ("qla2xxx [0000:31:00.1]-8038:16: Cable is unplugged...", "kernel", "storage"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _FORMS)
def test_each_programs_own_format_is_read(line: str, source: str, fault: str) -> None:
    assert fault in _classes(line, source)


def test_a_plugin_notice_in_its_own_format_names_no_failure() -> None:
    # the same format saying what it uses (the text changed): recorded, never an alert
    assert _acting("10.3.35.83: WARN: Function: main Line: 66: NET/OFI Selected provider is efa", "nccl") == []


def test_a_programs_error_text_is_judged_only_by_the_texts_that_say_the_program_is_wrong() -> None:
    # the same logged shape with a text that names nothing of the program (the text changed): no class from it
    assert "user_code" not in _classes("2025-11-10 21:45:45,378 - WARNING - Training batch error: connection dropped", "nccl")
