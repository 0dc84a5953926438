"""``typed(event, Struct)``: the payload read the type checker sees (issue 57). At run time an event
of another kind is refused by name; under mypy a read of a field the Struct lacks fails the check,
and so does a read that names no Struct (there is no untyped form left)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import NcclTimeout, TrainStep
from faultlens.events.payloads_log import ParsedLog
from faultlens.events.payloads_node import GpuXid, KernelXid
from tests.layout import ROOT

T = 1_790_000_000.0


def _ev(source: str, kind: str, **data) -> Envelope:
    return Envelope(ts=T, job="j", node="n0", source=source, kind=kind, data=data)


def test_the_expected_struct_is_returned_and_kept():
    event = _ev("train", "step", rank=2, step=7, loss=1.5)
    step = typed(event, TrainStep)
    assert type(step) is TrainStep and (step.rank, step.step, step.loss) == (2, 7, 1.5)
    assert event._payload is step is typed(event, TrainStep)  # read once, kept on the event
    assert typed(event, (TrainStep, ParsedLog)) is step  # a union that holds the kind's Struct


def test_a_struct_that_extends_the_expected_one_is_accepted():
    # Every parsed log payload is a ParsedLog (the catalogue rule reads its fault and action so).
    timeout = _ev("nccl", "nccl_timeout", rank=0, seq=5, fault="nccl_error", action="evict")
    assert type(typed(timeout, ParsedLog)) is NcclTimeout
    assert typed(_ev("kernel", "xid", xid=79), (KernelXid, GpuXid)).xid == 79
    assert typed(_ev("gpu", "xid", xid=48, index=0), (KernelXid, GpuXid)).xid == 48


@pytest.mark.parametrize("event,expected,words", [
    (_ev("train", "checkpoint", rank=0, step=100), TrainStep, ["train/checkpoint", "TrainCheckpoint", "not TrainStep"]),
    (_ev("kernel", "xid", xid=79), (TrainStep, GpuXid), ["kernel/xid", "KernelXid", "not TrainStep or GpuXid"]),
    (_ev("job", "paused"), TrainStep, ["job/paused", "no payload Struct"]),
])
def test_an_event_of_another_kind_is_refused_naming_its_kind(event, expected, words):
    with pytest.raises(InvalidEvent) as info:
        typed(event, expected)
    assert info.value.field == "kind" and all(w in info.value.reason for w in words), info.value.reason


def test_a_bad_field_is_still_named_under_the_typed_read():
    with pytest.raises(InvalidEvent) as info:
        typed(_ev("train", "step", rank="three"), TrainStep)
    assert info.value.field == "data.rank"


_READS = """
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainStep
from faultlens.events.payloads_node import GpuXid, KernelXid


def right(event: Envelope) -> int | None:
    return typed(event, TrainStep).step


def either(event: Envelope) -> int | None:
    return typed(event, (KernelXid, GpuXid)).xid


def wrong(event: Envelope) -> object:
    return typed(event, TrainStep).stepp


def untyped(event: Envelope) -> object:
    return typed(event)
"""


def test_a_read_of_a_field_the_struct_lacks_fails_the_type_check(tmp_path: Path):
    module = tmp_path / "reads.py"
    module.write_text(textwrap.dedent(_READS))
    mypy = Path(sys.executable).with_name("mypy")
    if not mypy.exists():
        pytest.fail("mypy is missing: the test extra installs it")
    # The project's packages are found from the checkout; their own errors (the ratchet's) are not this test's.
    res = subprocess.run([str(mypy), "--ignore-missing-imports", "--follow-imports=silent", "--cache-dir",
                          str(tmp_path / "cache"), str(module)], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "MYPYPATH": str(ROOT)})
    errors = [line for line in res.stdout.splitlines() if ": error:" in line]
    lines = _READS.splitlines()
    assert len(errors) == 2, res.stdout + res.stderr
    assert '"TrainStep" has no attribute "stepp"' in errors[0]
    assert errors[0].startswith(f"{module.name}:{lines.index('    return typed(event, TrainStep).stepp') + 1}:")
    assert 'No overload variant of "typed" matches argument type "Envelope"' in errors[1]
    assert errors[1].startswith(f"{module.name}:{lines.index('    return typed(event)') + 1}:")


def test_a_read_that_names_no_struct_is_refused_at_run_time_too():
    # Code the checker never saw (a notebook, a user's script) cannot take the payload untyped either.
    with pytest.raises(TypeError, match="expected"):
        typed(_ev("train", "step", rank=0))  # type: ignore[call-overload]
