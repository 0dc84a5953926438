"""TensorFlow's and Horovod's C++ log format states its level by one letter before the source line.

Each line is written for the test, beside its fault look-alike: the same line at a warning or error letter keeps
its reading (the model's guess, a rule's action); under a warning (trace, debug, info) it is recorded, never acted on.
"""

from __future__ import annotations

import pytest

from faultlens.parsing.severity import trainer_level
from faultlens.parsing.trainer_log import TrainerLogParser

# mpirun's per-rank prefix, then Horovod's own "[time: L path:line]" frame
_HVD = "Mon Mar  4 10:00:00 2024[1]<stderr>:[2024-03-04 10:00:00.123456: {} /tmp/pip-install-a1b2c3d4/horovod/horovod/common/operations.cc:537] [1]: Shutting down background thread"
_NCCL = "2024-05-01 10:00:00.123456: {} horovod/common/operations.cc:900] [1]: NCCL error: unhandled system error, aborting the background thread"


def _acting(line: str) -> list[tuple[object, object]]:
    parser = TrainerLogParser()
    return [
        (e.data["fault"], e.data["action"])
        for e in parser.feed(line) + parser.flush()
        if e.data.get("action") not in ("none", None)
    ]


@pytest.mark.parametrize("letter", ["T", "D"])
def test_a_line_the_format_states_at_trace_or_debug_is_not_acted_on(letter: str) -> None:
    assert _acting(_HVD.format(letter)) == []
    assert _acting(_NCCL.format(letter)) == []


@pytest.mark.parametrize("letter", ["W", "E"])
def test_the_same_line_at_a_warning_or_error_letter_keeps_its_reading(letter: str) -> None:
    # (round 46) At the W letter the line model's guess is not taken, as at glog's W or Python logging's WARNING (a guess
    # never outranks the line's warning level, parsing/fallback.py): the shutdown line the model reads storage is quiet
    # there; the words' own readings (NCCL's error) keep acting at W as at E.
    assert _acting(_HVD.format(letter)) == ([] if letter == "W" else [("storage", "alert")])
    assert _acting(_NCCL.format(letter)) == [("nccl_error", "reattempt")]


@pytest.mark.parametrize(
    ("message", "level"),
    [
        ("D horovod/common/operations.cc:537] [0]: Shutting down background thread", 7),  # the time taken off as the stamp
        ("[2024-03-04 10:00:00.123456: T horovod/common/gloo/gloo_context.cc:60] rendezvous started", 7),
        ("2024-03-04 10:00:00.123456: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1900] Created device", 6),
        ("E tensorflow/stream_executor/cuda/cuda_driver.cc:828] failed to allocate 32.00M", None),
        ("2024-05-11 07:02:19.331910: W external/xla/xla/service/hlo_rematerialization.cc:3005] Can't reduce memory use", 4),
        ("D state: the device is gone] ok", None),  # a capital D that opens a sentence is no level
    ],
)
def test_the_letter_is_read_only_in_the_formats_frame(message: str, level: int | None) -> None:
    assert trainer_level(message) == level
