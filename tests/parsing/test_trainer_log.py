"""TrainerLogParser on realistic torchrun / NCCL output."""

from __future__ import annotations

import pytest

from bench.testbed import log_samples as S
from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES
from faultlens.parsing.trainer_log import TrainerLogParser


def parse(*lines: str, flush: bool = True) -> list:
    p = TrainerLogParser()
    out = []
    for line in lines:
        out += p.feed(line)
    return out + (p.flush() if flush else [])


def one(*lines: str):
    events = parse(*lines)
    assert len(events) == 1, events
    return events[0]


def test_nccl_warn_ib_completion_error():
    e = one(S.NCCL_WARN_IB)
    assert e.kind == "nccl_warn"
    assert e.data["device"] == 3 and e.data["rank"] is None  # [3] is the CUDA device, not the rank
    assert (e.data["ib_error"], e.data["ib_opcode"], e.data["host"]) == (12, 0, "gpu-node-17")
    assert (e.data["fault"], e.data["action"], e.data["severity"]) == ("nccl_error", "reattempt", "error")


def test_nccl_warn_with_source_location():
    e = one("gpu-node-3:4242:4296 [1] misc/socket.cc:50 NCCL WARN socketProgress: Connection reset by peer gpu-node-9<58392>")
    assert (e.kind, e.data["device"], e.data["severity"]) == ("nccl_warn", 1, "error")


def test_nccl_warn_cuda_failure_is_a_cuda_fault():
    e = one(S.NCCL_WARN_CUDA)
    assert (e.kind, e.data["fault"]) == ("nccl_warn", "cuda_error")


def test_watchdog_timeout_old_format():
    e = one(S.WATCHDOG_OLD)
    assert e.kind == "nccl_timeout"
    assert (e.data["rank"], e.data["seq"], e.data["op"], e.data["timeout_ms"], e.data["elapsed_ms"]) == (
        3, 1234, "ALLREDUCE", 600000, 600017,
    )


def test_watchdog_timeout_new_format():
    e = one(S.WATCHDOG_NEW)
    assert (e.data["rank"], e.data["seq"], e.data["op"], e.data["timeout_ms"], e.data["elapsed_ms"]) == (
        5, 1234, "ALLREDUCE", 600000, 600083,
    )
    assert e.ts is not None  # the glog clock [E1122 10:11:12.345678 ...]


def test_last_completed_work():
    e = one(S.LAST_WORK)
    assert (e.kind, e.data["rank"], e.data["seq"], e.data["last_enqueued"], e.data["last_completed"]) == (
        "nccl_timeout", 5, 1235, 1235, 1234,
    )


@pytest.mark.parametrize(
    "line, rank, error",
    [
        (S.NCCL_REMOTE, 2, "ncclRemoteError"),
        (S.CONN_RESET, 7, "connection reset by peer"),
        (S.CONN_CLOSED, 0, "connection closed by peer"),
        ("[rank4]: torch.distributed.DistBackendError: ncclSystemError: System call failed", 4, "ncclSystemError"),
        ("[Rank 6] NCCL watchdog thread terminated with exception: ncclInternalError: internal check failed", 6, "ncclInternalError"),
        ("ncclUnhandledCudaError: Call to CUDA function failed. rank=9", 9, "ncclUnhandledCudaError"),
    ],
)
def test_nccl_errors(line, rank, error):
    e = one(line)
    assert (e.kind, e.data["rank"], e.data["error"], e.data["fault"]) == ("nccl_error", rank, error, "nccl_error")


def test_nccl_error_in():
    e = one(S.NCCL_ERROR_LINE)
    assert e.kind == "nccl_error" and "NCCLUtils.hpp:275" in e.data["error"]


@pytest.mark.parametrize(
    "line, fault, error",
    [
        (S.CUDA_ILLEGAL, "cuda_error", "an illegal memory access was encountered"),
        (S.CUDA_ECC, "gpu_memory", "uncorrectable ECC error encountered"),
        ("RuntimeError: CUDA error: unspecified launch failure", "cuda_error", "unspecified launch failure"),
        ("RuntimeError: CUDA error: device-side assert triggered", "user_code", "device-side assert triggered"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "user_code", "CUDA out of memory"),
    ],
)
def test_cuda_errors(line, fault, error):
    e = one(line)
    assert (e.kind, e.data["fault"], e.data["error"]) == ("cuda_error", fault, error)


def test_cublas_status():
    e = one(S.CUBLAS)
    assert e.data["error"].startswith("CUBLAS_STATUS_EXECUTION_FAILED") and e.data["fault"] == "cuda_error"


def test_cuda_ecc_rank_from_prefix():
    assert one(S.CUDA_ECC).data["rank"] == 1


@pytest.mark.parametrize(
    "line, step",
    [
        (S.NAN_LOSS, 4521),
        (S.NAN_LOSS_2, 4522),
        ("Detected NaN in the loss at step 77", 77),
        ("WARNING: loss is nan", None),
        ("grad_norm=inf, skipping update", None),
    ],
)
def test_nan_messages(line, step):
    e = one(line)
    assert (e.kind, e.data["fault"], e.data["action"], e.data["step"]) == ("nan", "nan_loss", "stop_time_diagnosis", step)


def test_benign_trainer_lines_are_skipped():
    p = TrainerLogParser()
    for line in S.TRAINER_BENIGN + ["loss 2.31 nanoseconds 12", "model has 7 finite layers; loss=2.5"]:
        assert p.feed(line) == [], line
    assert p.stats.recognised == 0 and p.stats.skipped == p.stats.lines


def test_user_traceback_with_rank_prefix():
    e = one(*S.TRACEBACK_USER)
    assert e.kind == "exception"
    assert (e.data["rank"], e.data["type"], e.data["message"]) == (3, "KeyError", "'tokens'")
    assert (e.data["file"], e.data["lineno"], e.data["func"]) == ("/workspace/data/prep.py", 41, "prepare")
    assert e.data["user_code"] is True
    assert (e.data["fault"], e.data["action"]) == ("user_code", "rollback")
    assert e.data["line"].count("\n") == len(S.TRACEBACK_USER) - 1


def test_traceback_ending_in_cuda_error_is_not_user_code():
    events = parse(*S.TRACEBACK_CUDA)
    # The exception (with its frame) and the CUDA error itself; the "CUDA kernel errors might be..."
    # epilogue adds nothing.
    assert [e.kind for e in events] == ["exception", "cuda_error"]
    e = events[0]
    assert (e.data["fault"], e.data["user_code"]) == ("cuda_error", False)
    assert e.data["file"] == "/workspace/train.py"  # innermost USER frame, not torch's
    assert events[1].data["error"] == "an illegal memory access was encountered"


def test_user_fault_traceback_has_no_cuda_companion():
    lines = S.TRACEBACK_CUDA[:7] + ["RuntimeError: CUDA error: device-side assert triggered"]
    assert [(e.kind, e.data["fault"]) for e in parse(*lines)] == [("exception", "user_code")]


def test_error_repeated_on_following_lines_is_one_event():
    lines = [
        "[rank5]:[E1122 10:11:12.000001 11 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 5] Process group "
        "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
        "[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "[rank5]: CUDA kernel errors might be asynchronously reported at some other API call.",
        "[rank6]: RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    events = parse(*lines)
    assert [(e.kind, e.data["rank"]) for e in events] == [("cuda_error", 5), ("cuda_error", 6)]


def test_traceback_ending_in_nccl_error_then_detail_line_is_folded():
    lines = [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 55, in step',
        "    dist.all_reduce(t)",
        '  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 79, in wrapper',
        "    return func(*args, **kwargs)",
        S.NCCL_ERROR_LINE,
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
    ]
    events = parse(*lines)
    assert [(e.kind, e.data["fault"]) for e in events] == [("exception", "nccl_error"), ("nccl_error", "nccl_error")]
    assert events[0].data["user_code"] is False


def test_library_exception_is_not_user_code():
    e = one(*S.TRACEBACK_LIBRARY)
    assert e.data["user_code"] is False and e.data["fault"] == "unknown"
    assert e.data["file"] == "/workspace/train.py"


def test_interleaved_tracebacks_of_two_ranks():
    a = S.TRACEBACK_USER
    b = [line.replace("[rank3]", "[rank4]").replace("KeyError: 'tokens'", "ValueError: shape mismatch") for line in a]
    mixed = [x for pair in zip(a, b, strict=True) for x in pair]
    events = parse(*mixed)
    assert sorted((e.data["rank"], e.data["type"]) for e in events) == [(3, "KeyError"), (4, "ValueError")]


def test_chained_tracebacks_give_one_event_each():
    lines = S.TRACEBACK_LIBRARY + ["", "During handling of the above exception, another exception occurred:", ""] + S.TRACEBACK_USER
    events = parse(*lines)
    assert [e.data["type"] for e in events] == ["RuntimeError", "KeyError"]


def test_truncated_traceback_is_flushed():
    p = TrainerLogParser()
    assert [e for line in S.TRACEBACK_TRUNCATED for e in p.feed(line)] == []
    events = p.flush()
    assert len(events) == 1
    assert events[0].data["truncated"] is True and events[0].data["rank"] == 6 and events[0].data["type"] is None


def test_traceback_abandoned_after_foreign_lines_is_reported_and_foreign_lines_still_parse():
    p = TrainerLogParser()
    out = []
    for line in ["Traceback (most recent call last):", '  File "/w/x.py", line 1, in f'] + ["noise"] * 40 + [S.CUDA_ILLEGAL]:
        out += p.feed(line)
    assert [e.kind for e in out] == ["exception", "cuda_error"]
    assert out[0].data["truncated"] is True


def test_local_rank_prefix_is_not_the_rank():
    e = one("[default2]: RuntimeError: CUDA error: an illegal memory access was encountered")
    assert e.data["rank"] is None and e.data["local_rank"] == 2


def test_every_event_carries_the_common_keys():
    lines = [v for k, v in vars(S).items() if k.isupper() and isinstance(v, str)]
    lines += S.TRACEBACK_USER + S.TRACEBACK_CUDA + S.TRACEBACK_TRUNCATED
    p = TrainerLogParser()
    events = [e for line in lines for e in p.feed(line)] + p.flush()
    assert len(events) > 15
    for e in events:
        assert e.source == "nccl"
        assert e.data["fault"] in FAULT_CLASSES and e.data["action"] in ACTIONS
        assert "rank" in e.data and e.data["line"]
    assert p.stats.lines == p.stats.recognised + p.stats.skipped + p.stats.garbled


def test_very_long_traceback_is_capped_but_complete():
    frames = [f'  File "/workspace/model.py", line {i}, in f{i}\n    f{i + 1}()' for i in range(2000)]
    lines = ["Traceback (most recent call last):"] + "\n".join(frames).split("\n") + ["RecursionError: maximum recursion depth exceeded"]
    e = one(*lines)
    assert (e.data["type"], e.data["user_code"], e.data["func"]) == ("RecursionError", True, "f1999")
    assert len(e.data["line"]) <= 4096 + 200
