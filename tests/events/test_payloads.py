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
    (_ev("kernel", "disk_error", fault="disk", rule="storage.nvme_disabled", device="nvme4"), "data.fault"),
    (_ev("kernel", "nfs_error", severity="critical", server="fs1"), "data.severity"),
    (_ev("kernel", "nfs_error", server=["fs1"]), "data.server"),
    (_ev("kernel", "xid", xid=79, action="reboot_everything"), "data.action"),
    (_ev("kernel", "suspect_line", confidence=1.5), "data.confidence"),
    (_ev("nccl", "nccl_warn", ib_error="12"), "data.ib_error"),
    (_ev("nccl", "my_rule_kind", rule="site.x", count=-2), "data.count"),
    (_ev("train", "command_ack", rank=0, obeyed="yes"), "data.obeyed"),
    (_ev("job", "topology", tp=1, pp=1, dp=1, ranks=[{"rank": 0, "tp": 0, "pp": 0, "dp": 0}]), "data.ranks"),
    (_ev("job", "restart", reason="evicted", nodes_out="n3"), "data.nodes_out"),
    (_ev("summary", "window", start=1.0, features={"util": "high"}), "data.features"),
    (_ev("summary", "finding", fault="gpu_gone", action="evict"), "data.fault"),
    (_ev("summary", "watermark", member="m", watermark=float("nan")), "data.watermark"),
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
    _ev("kernel", "disk_error", fault="storage", action="evict", severity="fatal", rule="r", device="0"),
    _ev("kernel", "disk_error", device=0, sector=123, folded=True, count=4),  # a group may read as an int
    _ev("nccl", "my_rule_kind", rule="site.x", fault="nic", anything=["kept"]),  # a user rule's own kind
    _ev("summary", "watermark", member="m", watermark=None, reads=["telemetry:0"], of=6, behind=False),
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
