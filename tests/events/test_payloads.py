"""Payload keys of docs/events.md with the wrong type are refused, naming the field."""

import pytest

from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.payloads import check_payload

T = 1_790_000_000.0


def _ev(source, kind, **data):
    return Envelope(ts=T, job="j", node="n0", source=source, kind=kind, data=data)


@pytest.mark.parametrize("event,field", [
    (_ev("gpu", "sample", gpus={"0": {}}, interval_s=1), "data.gpus"),
    (_ev("gpu", "sample", gpus=[{"index": 0, "temp_c": "hot"}], interval_s=1), "data.gpus"),
    (_ev("gpu", "sample", gpus=[], interval_s=-5), "data.interval_s"),
    (_ev("train", "step", rank="3", step=1, step_time_s=1.0), "data.rank"),
    (_ev("train", "step", rank=3, step=1, loss={"value": 1.0}), "data.loss"),
    (_ev("train", "step", rank=3, step=1, step_time_s=-0.2), "data.step_time_s"),
    (_ev("train", "step", rank=True, step=1), "data.rank"),
    (_ev("heartbeat", "beat", seq=1, pids="123"), "data.pids"),
    (_ev("nccl", "nccl_timeout", rank=1, seq=5, timeout_ms=-1), "data.timeout_ms"),
    (_ev("kernel", "xid", xid="79"), "data.xid"),
    (_ev("stack", "stack_dump", rank=0, pid=1, dump=["not", "text"]), "data.dump"),
])
def test_wrong_types_are_named(event, field):
    with pytest.raises(InvalidEvent) as info:
        check_payload(event)
    assert info.value.field == field


@pytest.mark.parametrize("event", [
    _ev("gpu", "sample", gpus=[{"index": 0, "temp_c": None, "throttle": None, "util": 97}], interval_s=1.0),
    _ev("train", "step", rank=0, step=10, loss="nan", grad_norm="inf", step_time_s=1.2),
    _ev("train", "step", rank=0, step=10),  # keys a detector needs are its business, not the schema's
    _ev("heartbeat", "beat", seq=3, pids=[11, 12], sources={"nvml": "ok"}),
    _ev("stack", "stack_dump", rank=None, pid=None, dump="py-spy: not found", ok=False),
    _ev("kernel", "xid", xid=79, pci="0000:3b:00", extra_key={"anything": 1}),  # unknown keys pass
])
def test_documented_payloads_pass(event):
    check_payload(event)


def test_an_integer_too_large_for_a_float_is_a_verdict_not_a_crash():
    # Not from the wire (orjson reads such an integer as a float), but from an in-process producer.
    from faultlens.events.payloads import PAYLOAD_TYPES
    for (source, kind), payload_type in PAYLOAD_TYPES.items():
        for key in payload_type.__struct_fields__:
            for value in (10**400, -10**400, [10**400], {"a": 10**400}):
                event = Envelope(ts=T, job="j", node="n", source=source, kind=kind, data={key: value})
                try:
                    check_payload(event)
                except InvalidEvent as exc:
                    assert exc.field == f"data.{key}"
