"""The payload Structs (events/payloads.py): an event's typed payload, its reasons, and the names."""

import math
import re
from pathlib import Path

import orjson
import pytest

from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES, Action, Diagnosis, FaultClass
from faultlens.events.envelope import SOURCES, Envelope, InvalidEvent, Source, decode, encode
from faultlens.events.payloads import PAYLOAD_TYPES, check_payload, payload_type_of, typed
from faultlens.events.payloads_job import CheckResult, TrainStep
from faultlens.events.payloads_log import ParsedLog
from faultlens.events.payloads_node import GpuEntry, GpuSample, KernelXid, NetSample

T = 1_790_000_000.0


def _ev(source, kind, **data):
    return Envelope(ts=T, job="j", node="n0", source=source, kind=kind, data=data)


def test_a_checked_event_carries_its_typed_payload():
    event = _ev("kernel", "xid", xid=79, pci="0000:3b:00.0", pid=4242, sympathetic=False, mnemonic="GPU has fallen off")
    check_payload(event)
    payload = typed(event, KernelXid)
    assert type(payload) is KernelXid and payload.xid == 79 and payload.pid == 4242 and payload.pci == "0000:3b:00.0"
    assert event._payload is payload is typed(event, KernelXid)  # read once, kept


def test_the_payload_is_read_on_first_use_where_no_check_ran():
    event = _ev("train", "step", rank=3, step=10, loss="nan", grad_norm=2.5, step_time_s=1.2, extra={"k": 1})
    payload = typed(event, TrainStep)
    assert type(payload) is TrainStep and payload.rank == 3 and payload.loss == "nan" and payload.compute_s is None
    assert event.data["extra"] == {"k": 1}  # an unknown key stays in the data
    assert orjson.loads(encode(event))["data"] == event.data  # what goes on the wire is unchanged


def test_a_wrong_payload_refuses_its_typed_read_naming_the_field():
    event = _ev("gpu", "sample", gpus=[{"index": 0, "temp_c": 60}, {"index": 1, "temp_c": "hot"}], interval_s=1)
    with pytest.raises(InvalidEvent) as info:
        typed(event, GpuSample)
    assert info.value.field == "data.gpus" and info.value.reason.startswith("[1].temp_c: ")


def test_a_kind_without_a_struct_has_no_payload():
    # A kind no producer makes (the intake refuses it as unknown: diagnosis.engine.kinds.known_kind), or
    # a log kind that names no catalogue rule.
    for event in (_ev("job", "paused", reason="maintenance"), _ev("kernel", "my_alarm", line="x")):
        check_payload(event)
        assert event._payload is None and payload_type_of(event) is None
        with pytest.raises(InvalidEvent, match="carries no payload Struct"):
            typed(event, ParsedLog)


@pytest.mark.parametrize("data,field,words", [
    ({"checks": [{"name": "disk", "passed": True}, {"passed": False}]}, "data.checks", ["[1]", "name"]),
    ({"ports": [{"device": "mlx5_0", "rates": {"symbol_error": -1.0}}]}, "data.ports", ["[0].rates", ">= 0"]),
    ({"gpus": [], "interval_s": math.inf}, "data.interval_s", ["<="]),
    ({"rank": 0, "loss": "+infinity"}, "data.loss", ["nan"]),
])
def test_reasons_name_the_field_and_what_is_wrong(data, field, words):
    kind = {"checks": ("check", "result"), "ports": ("net", "sample"), "gpus": ("gpu", "sample")}.get(
        next(iter(data)), ("train", "step"))
    with pytest.raises(InvalidEvent) as info:
        check_payload(_ev(*kind, **data))
    assert info.value.field == field
    assert all(word in info.value.reason for word in words), info.value.reason


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf, "nan", " NaN ", "inf", "-inf", "+inf", "Infinity",
                                  "-infinity", 0, 2.5])
def test_a_metric_may_be_non_finite(loss):
    check_payload(_ev("train", "step", rank=0, step=1, loss=loss, grad_norm=loss))


@pytest.mark.parametrize("value", [math.nan, math.inf, True, "1.0"])
def test_a_measurement_must_be_a_finite_number(value):
    with pytest.raises(InvalidEvent) as info:
        check_payload(_ev("host", "sample", cpu_util=value))
    assert info.value.field == "data.cpu_util"


def test_the_quick_ways_give_the_same_struct_as_the_data():
    # A sample read by the typed readers is checked as it is parsed; its payload, asked for, is
    # the Struct its data reads as.
    from faultlens.events.gpu_reading import decode_gpu_message
    from faultlens.events.net_reading import decode_net_message
    gpu = {"index": 0, "uuid": "GPU-1", "util": 97, "temp_c": 64.0, "power_w": 554.2, "power_limit_w": 700.0,
           "sm_clock_mhz": 1935, "sm_clock_max_mhz": 1980, "ecc_dbe_volatile": 0, "ecc_dbe_aggregate": 0,
           "remap_uncorrectable": 0, "retired_pages_sbe": None, "retired_pages_dbe": None, "pcie_replay": 3,
           "throttle": ["sw_power_cap"], "mem_util": 41}
    port = {"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE", "phys_state": "LinkUp",
            "rate_gbps": 200.0, "netdev": "ib0", "rates": {"symbol_error": 0.0}, "deltas": {"symbol_error": 0}}
    for source, data, read in (("gpu", {"gpus": [gpu], "interval_s": 1.0}, decode_gpu_message),
                               ("net", {"ports": [port], "interval_s": 5.0}, decode_net_message)):
        raw = orjson.dumps({"v": 1, "id": "e1", "ts": T, "job": "j", "node": "n0", "source": source, "kind": "sample",
                            "data": data})
        quick, general = read(raw), decode(raw)
        check_payload(quick)
        check_payload(general)
        if source == "gpu":  # the typed read skips the values no detector reads
            q, g = typed(quick, GpuSample), typed(general, GpuSample)
            assert q.gpus[0].mem_util is None and g.gpus[0].mem_util == 41
            assert type(q.gpus[0]) is GpuEntry
            assert [r.temp_c for r in q.gpus] == [r.temp_c for r in g.gpus] == [64.0]
        else:
            assert type(typed(quick, NetSample)) is NetSample and typed(quick, NetSample) == typed(general, NetSample)


def test_every_struct_is_listed_in_the_events_page():
    page = (Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text()
    table = page[page.index("## Payload types"):page.index("Numbers that can be non-finite")]
    for (source, kind), payload_type in PAYLOAD_TYPES.items():
        assert f"`{source}`/`{kind}`" in table and f"`{payload_type.__name__}`" in table, (source, kind)
        module = payload_type.__module__.rsplit(".", 1)[1]
        row = next(line for line in table.splitlines() if f"`{source}`/`{kind}`" in line)
        assert f"events/{module}.py" in row


def test_check_item_names_and_results_read_typed():
    event = _ev("check", "result", request_id="c1", passed=False, failed=["disk"],
                checks=[{"name": "disk", "passed": False, "detail": "no space", "duration_s": 0.2}, None])
    payload = typed(event, CheckResult)
    assert type(payload) is CheckResult and payload.checks[0].name == "disk" and payload.checks[1] is None


def test_the_names_are_enums_equal_to_their_strings():
    assert set(Source) == SOURCES and Source.GPU == "gpu" and f"{Source.NET}" == "net"
    assert tuple(FaultClass) == FAULT_CLASSES and tuple(Action) == ACTIONS
    assert all(type(name) is str for name in FAULT_CLASSES + ACTIONS)  # the tuples stay plain strings
    d = Diagnosis(job="j", ts=T, onset=T, fault=FaultClass.GPU_LOST, action=Action.EVICT, nodes=("n1",))
    plain = Diagnosis(job="j", ts=T, onset=T, fault="gpu_lost", action="evict", nodes=("n1",))
    assert d == plain and d.id == plain.id and d.encode() == plain.encode()
    assert re.search(rb'"fault":"gpu_lost"', d.encode())
    with pytest.raises(InvalidEvent):
        Diagnosis(job="j", ts=T, onset=T, fault="gpu_gone", action="evict")


def test_the_kept_payload_is_no_part_of_the_event():
    import dataclasses
    event = _ev("kernel", "xid", xid=48, pci="0000:18:00.0")
    check_payload(event)
    again = _ev("kernel", "xid", xid=48, pci="0000:18:00.0")
    again = dataclasses.replace(again, id=event.id)
    assert again == event and again._payload is None  # equal whether its payload was read or not
    moved = dataclasses.replace(event, ts=T + 5)  # as the consumers place a skewed event in time
    assert typed(moved, KernelXid) == typed(event, KernelXid) and typed(moved, KernelXid) is not typed(event, KernelXid)
