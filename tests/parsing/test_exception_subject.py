"""A generic exception's own words naming what failed (parsing.exception_subject), where the exception table keeps
its type unknown: each form on a line written here, beside the look-alike another reading gives another class."""

from __future__ import annotations

import pytest

from faultlens.parsing.exception_subject import read_subject
from faultlens.parsing.registry import parser_for


def _classes(*lines: str) -> list[tuple[str, str]]:
    parser = parser_for("nccl")
    events = [e for line in lines for e in parser.feed(line)] + parser.flush()
    return [(e.data.get("fault"), e.data.get("action")) for e in events]


@pytest.mark.parametrize(
    ("line", "want", "look_alike", "other"),
    [
        # the collective backend's own type; not the same type naming the caller's misuse (NCCL's usage result)
        (
            "[rank3]: torch.distributed.DistBackendError: NCCL error in /opt/torch/csrc/c10d/NCCLUtils.cpp:81, remote process exited",
            ("nccl_error", "reattempt"),
            "[rank3]: torch.distributed.DistBackendError: NCCL communicator reported ncclInvalidUsage on rank 3",
            ("user_code", "rollback"),
        ),
        # the device's allocator could not allocate; not the host's allocator, which the exception table reads first
        (
            "RuntimeError: Stage 2 of the decoder: GPU memory allocation failed for 3 buffers",
            ("user_code", "rollback"),
            "RuntimeError: [enforce fail at alloc_cpu.cpp:83] . DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes",
            ("host_oom", "restart"),
        ),
        # a runtime's tensor allocation by its status and text; not an allocation that failed for the host's memory
        (
            'ERROR 03-01 09:12:44 worker.py:120] RuntimeError: xla_tensor_allocate status=5 message="Allocation Failure"',
            ("user_code", "rollback"),
            "RuntimeError: device allocation of the staging buffer failed: [Errno 12] Cannot allocate memory",
            ("host_oom", "restart"),
        ),
        # the library refuses the request; not a generic exception naming no component (the stop-time checks decide)
        (
            "RuntimeError: bf16 grouped gemm is not supported on this architecture",
            ("user_code", "rollback"),
            "RuntimeError: grouped gemm failed after 3 attempts",
            ("unknown", "stop_time_diagnosis"),
        ),
        (
            "RuntimeError: FlashPack currently does not work with tensor parallel sizes above 1",
            ("user_code", "rollback"),
            "RuntimeError: FlashPack worker 3 did not answer within 600 seconds",
            ("unknown", "stop_time_diagnosis"),
        ),
        # autograd's check of a view changed in place; not a CUDA error whose code the runtime's table reads
        (
            "RuntimeError: Output 1 of SplitBackward0 is a view and is being modified inplace. This view was created",
            ("user_code", "rollback"),
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            ("cuda_error", "stop_time_diagnosis"),
        ),
    ],
)
def test_each_form_beside_its_look_alike(line: str, want: tuple[str, str], look_alike: str, other: tuple[str, str]) -> None:
    assert _classes(line) == [want]
    assert _classes(look_alike) == [other]


def test_a_traceback_from_library_frames_reads_the_message_too() -> None:
    tb = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl',
        "    return forward_call(*args, **kwargs)",
    ]
    assert ("user_code", "rollback") in _classes(*tb, "RuntimeError: fp8 attention is not supported for head size 80", "")
    assert ("unknown", "stop_time_diagnosis") in _classes(*tb, "RuntimeError: attention kernel returned 7", "")


def test_no_line_becomes_an_event_that_was_none() -> None:
    # a type the exception table does not know stays unread, whatever its words: the reading changes a class only
    assert _classes("PluginError: the renderer does not support this format") == []
    assert read_subject("RuntimeError", "the renderer does not support this format") == (
        "user_code",
        "rollback",
        "the library does not support the request",
    )
    assert read_subject("RuntimeError", "timeout (dispatch CPU)") is None
