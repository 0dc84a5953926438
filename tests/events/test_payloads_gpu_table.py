"""The one read of a gpu/sample (events.gpu_table) agrees with the payload Struct's verdict."""

import math

import pytest

from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.gpu_table import TABLE_NUMBERS, gpu_table, read_table
from faultlens.events.payloads import check_payload

T = 1_790_000_000.0


def _gpu(index: int = 0, **over) -> dict:
    """One GPU's entry as collectors/gpu_sample.gpu_payload writes it (an H100 PCIe card: no NVLink
    counters, so ``nvlink_errors`` is null; NVML reported no recovery action)."""
    g = {"index": index, "uuid": f"GPU-3f1c2a9e-7b4d-4c1e-9a2b-00000000000{index}", "util": 97, "mem_util": 41,
         "mem_used_mb": 76746.0, "mem_total_mb": 81559.0, "temp_c": 64, "power_w": 554.17, "power_limit_w": 700.0,
         "sm_clock_mhz": 1935, "mem_clock_mhz": 2619, "sm_clock_max_mhz": 1980, "throttle": ["sw_power_cap"],
         "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0, "ecc_sbe_aggregate": 3, "ecc_dbe_aggregate": 0,
         "remap_correctable": 0, "remap_uncorrectable": 0, "remap_pending": False, "remap_failure": False,
         "retired_pages_sbe": None, "retired_pages_dbe": None, "retired_pending": None, "pcie_replay": 12,
         "nvlink_errors": None, "recovery_action": None}
    g.update(over)
    return g


def _sample(gpus) -> Envelope:
    return Envelope(ts=T, job="j", node="n0", source="gpu", kind="sample", data={"gpus": gpus, "interval_s": 1.0})


def test_a_plain_sample_is_read_into_columns():
    table = read_table([_gpu(0), _gpu(1, util=12.5, temp_c=None)])
    assert table is not None and table.has_null
    assert table.column("util") == [97, 12.5]
    assert table.column("temp_c") == [64, None]
    assert table.index == [0, 1]
    assert len(table.numbers) == 2 * len(TABLE_NUMBERS)
    check_payload(_sample(table.gpus))


def test_the_table_is_read_once_per_event():
    event = _sample([_gpu(0)])
    assert gpu_table(event) is gpu_table(event)
    other = _sample([_gpu(0)])
    assert gpu_table(other) is not gpu_table(event)


@pytest.mark.parametrize("over,key", [
    ({"temp_c": "hot"}, "temp_c"),
    ({"util": True}, "util"),
    ({"power_w": math.nan}, "power_w"),
    ({"pcie_replay": math.inf}, "pcie_replay"),
    ({"index": -1}, "index"),
    ({"index": "0"}, "index"),
    ({"uuid": 7}, "uuid"),
    ({"throttle": ["hw_thermal", 3]}, "throttle"),
    ({"throttle": "hw_thermal"}, "throttle"),
])
def test_a_bad_value_is_not_plain_and_the_check_names_it(over, key):
    gpus = [_gpu(0), {**_gpu(1), **over}]
    assert read_table(gpus) is None
    with pytest.raises(InvalidEvent) as info:
        check_payload(_sample(gpus))
    assert info.value.field == "data.gpus" and key in info.value.reason


@pytest.mark.parametrize("gpus", [
    [{"index": 0, "util": 97, "temp_c": 65}],  # keys left out read as null
    [_gpu(0), "not an object"],
    [_gpu(0, throttle=None)],
])
def test_odd_but_valid_samples_are_looked_at_closely(gpus):
    table = read_table(gpus)
    if any(not isinstance(g, dict) for g in gpus):
        assert table is None
        with pytest.raises(InvalidEvent):
            check_payload(_sample(gpus))
        return
    check_payload(_sample(gpus))


def test_a_missing_key_a_detector_reads_is_not_plain():
    g = _gpu(0)
    del g["temp_c"]
    assert read_table([g]) is None
    check_payload(_sample([g]))  # read as null, key by key


@pytest.mark.parametrize("over", [
    {"nvlink_errors": {"replay": "2", "recovery": 0}},
    {"nvlink_errors": {"crc_flit": math.nan}},
    {"nvlink_errors": [3]},
    {"mem_util": "41%"},
    {"ecc_sbe_aggregate": math.inf},
    {"recovery_action": "reboot"},
])
def test_a_value_no_detector_reads_is_not_looked_at_in_a_plain_sample(over):
    gpus = [_gpu(0), {**_gpu(1), **over}]
    assert read_table(gpus) is not None
    check_payload(_sample(gpus))
    # Where a read value is odd too, the sample is looked at key by key, every documented key.
    with pytest.raises(InvalidEvent):
        check_payload(_sample([_gpu(0), {**_gpu(1), **over, "temp_c": "hot"}]))


def test_a_missing_key_no_detector_reads_leaves_the_sample_plain():
    g = _gpu(0)
    del g["mem_clock_mhz"]
    assert read_table([g]) is not None


def test_an_empty_sample_is_plain():
    table = read_table([])
    assert table is not None and table.gpus == [] and table.column("util") == []


def _struct_verdict(event: Envelope) -> str | None:
    """The verdict of the kind's Struct alone, read from the data (the way every quick one must agree with)."""
    from faultlens.events.payload_fields import convert
    from faultlens.events.payloads import PAYLOAD_TYPES
    try:
        convert(event.data, PAYLOAD_TYPES[(event.source, event.kind)])
    except InvalidEvent as exc:
        return str(exc)
    return None


def _port(**over) -> dict:
    """One RDMA port of a `net`/`sample` as collectors/net_counters.py writes it (two counters shown)."""
    p = {"device": "mlx5_0", "port": 1, "link_layer": "InfiniBand", "state": "ACTIVE", "phys_state": "LinkUp",
         "rate_gbps": 200.0, "netdev": "ib0", "rates": {"symbol_error": 0.0, "port_xmit_wait": 6508.8},
         "deltas": {"symbol_error": 0, "port_xmit_wait": 32544}}
    p.update(over)
    return p


_ODD = [None, True, False, "x", "nan", -1, -0.5, math.nan, math.inf, [], {}, ["a"], [1], 2**70, 0, 1.5]


@pytest.mark.parametrize("value", _ODD, ids=repr)
def test_the_quick_checks_agree_with_the_element_checks(value):
    keys = ["util", "index", "uuid", "throttle"]  # read by a detector (an unread one is not looked at, above)
    events = [_sample([_gpu(0), {**_gpu(1), key: value}]) for key in keys]
    events += [Envelope(ts=T, job="j", node="n0", source="net", kind="sample", data={"ports": ports, "interval_s": 5.0})
               for ports in ([_port(rate_gbps=value)], [_port(port=value)], [_port(state=value)],
                             [_port(rates={"symbol_error": value})], [_port(deltas={"symbol_error": value})],
                             [_port(), value])]
    events += [Envelope(ts=T, job="j", node="n0", source="train", kind="step", data={"rank": 0, "step": 1, key: value})
               for key in ("step", "loss", "step_time_s")]
    events.append(Envelope(ts=T, job="j", node="n0", source="heartbeat", kind="beat", data={"seq": 1, "pids": [1, value]}))
    for event in events:
        try:
            check_payload(event)
            verdict = None
        except InvalidEvent as exc:
            verdict = str(exc)
        assert verdict == _struct_verdict(event), event.data


def test_nvlink_errors_as_the_nvml_collector_writes_them_are_valid():
    # collectors/nvml_sampler.py: each NVLink error counter summed over the active links
    from faultlens.collectors.gpu_sample import GpuReading, gpu_payload

    reading = GpuReading(index=0, uuid="GPU-1", nvlink_errors={"replay": 2, "recovery": 0, "crc_flit": 11,
                                                                "crc_data": 0})
    gpus = [gpu_payload(reading), {**_gpu(1), "nvlink_errors": {"replay": 0, "recovery": None}}, _gpu(2)]
    check_payload(_sample(gpus))
    assert read_table(gpus) is not None  # the fast path takes it too
