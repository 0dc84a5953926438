"""The typed read of an NVML sample (events.gpu_reading) gives what the general decoding and the
key-by-key check give: the same table, the same rows, the same verdict on odd input."""

import gc
from collections.abc import Mapping

import orjson
import pytest

from faultlens.events.envelope import Envelope, InvalidEvent, decode, encode
from faultlens.events.gpu_reading import GpuReading, decode_gpu_message
from faultlens.events.gpu_table import gpu_table, read_table
from faultlens.events.payloads import check_payload
from tests.events.damaged import damaged

T = 1_790_000_000.0


def _gpu(n: int = 0, **over) -> dict:
    """One GPU as collectors/gpu_sample.gpu_payload writes it for an SXM H100 on a DGX: NVLink
    counters summed over its links, ECC counters, a power cap throttle."""
    g = {"index": n, "uuid": f"GPU-9f0c3a1e-52d4-4b7e-8c1a-00000000000{n}", "util": 100, "mem_util": 44.0,
         "mem_used_mb": 77021.0, "mem_total_mb": 81559, "temp_c": 63.0, "power_w": 611.42, "power_limit_w": 700.0,
         "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "sm_clock_max_mhz": 1980, "throttle": ["sw_power_cap"],
         "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0, "ecc_sbe_aggregate": 2, "ecc_dbe_aggregate": 0,
         "remap_correctable": 1, "remap_uncorrectable": 0, "remap_pending": False, "remap_failure": False,
         "retired_pages_sbe": None, "retired_pages_dbe": None, "retired_pending": None, "pcie_replay": 0,
         "nvlink_errors": {"replay": 0, "recovery": 0, "crc_flit": 3, "crc_data": 0}, "recovery_action": 0}
    g.update(over)
    return g


def _message(gpus, **data) -> bytes:
    return orjson.dumps({"v": 1, "id": "e1", "ts": T, "job": "llm", "node": "dgx-a17", "source": "gpu",
                         "kind": "sample", "data": {"gpus": gpus, "interval_s": 1.0, **data}})


def _verdict(event: Envelope) -> str | None:
    try:
        check_payload(event)
    except InvalidEvent as exc:
        return str(exc)
    return None


def test_a_plain_sample_reads_as_the_general_decoding_does():
    raw = _message([_gpu(0), _gpu(1, temp_c=None, throttle=None, util=12.5), _gpu(2, nvlink_errors=None)])
    typed, general = decode_gpu_message(raw), decode(raw)
    assert type(typed.data["gpus"][0]) is GpuReading
    assert (typed.id, typed.ts, typed.node, typed.data.keys()) == (general.id, general.ts, general.node,
                                                                     general.data.keys())
    # The keys some detector reads, as the general decoding reads them; the others skipped.
    assert [dict(g) for g in typed.data["gpus"]] == [{k: g[k] for k in row} for g, row in
                                                      zip(general.data["gpus"], typed.data["gpus"], strict=True)]
    assert {"nvlink_errors", "mem_util", "recovery_action"}.isdisjoint(typed.data["gpus"][0])
    mine, theirs = gpu_table(typed), read_table(general.data["gpus"])
    assert mine.typed and not theirs.typed
    assert (mine.numbers, mine.has_null, mine.index, mine.uuid, mine.throttle) == \
           (theirs.numbers, theirs.has_null, theirs.index, theirs.uuid, theirs.throttle)
    assert _verdict(typed) is None
    # A re-encoding sends the rows as read (a consumer passes on the message's own bytes instead).
    again = orjson.loads(encode(typed))
    assert again["data"]["gpus"] == [dict(g) for g in typed.data["gpus"]] and again["id"] == "e1"


def test_a_row_reads_as_a_dict():
    row = decode_gpu_message(_message([{k: v for k, v in _gpu(0).items() if k != "retired_pending"}])).data["gpus"][0]
    assert isinstance(row, Mapping)
    assert row["temp_c"] == 63.0 and row.get("power_w") == 611.42 and row["remap_pending"] is False
    assert "retired_pending" not in row and row.get("retired_pending", "absent") == "absent"
    with pytest.raises(KeyError):
        row["retired_pending"]
    with pytest.raises(KeyError):
        row["no_such_key"]
    assert len(row) == len(list(row.items())) == len(GpuReading.__struct_fields__) - 1


@pytest.mark.parametrize("over", [
    {"serial": "1654922004501", "pci_bus_id": "00000000:18:00.0"},  # not documented
    {"nvlink_errors": {"replay": "2"}, "mem_util": "41%", "recovery_action": [1]},  # documented, unread
])
def test_a_key_no_detector_reads_is_skipped(over):
    raw = _message([_gpu(0, **over)])
    event = decode_gpu_message(raw)
    assert type(event.data["gpus"][0]) is GpuReading and set(over).isdisjoint(event.data["gpus"][0])
    assert _verdict(event) is None and _verdict(decode(raw)) is None  # the general reading agrees


@pytest.mark.parametrize("gpus,data", [
    ([_gpu(0), _gpu(1, temp_c="hot")], {}),
    ([_gpu(0, util=True)], {}),
    ([_gpu(0, index=-1)], {}),
    ([_gpu(0, index="0")], {}),
    ([_gpu(0, uuid=7)], {}),
    ([_gpu(0, throttle=["hw_thermal", 3])], {}),
    ([_gpu(0, throttle="hw_thermal")], {}),
    ([_gpu(0, pcie_replay=2**64)], {}),  # past what the typed read takes, a number all the same
    ([_gpu(0, power_w=1e305)], {}),
    ([{k: v for k, v in _gpu(0).items() if k != "sm_clock_mhz"}], {}),  # a read key left out
    ([_gpu(0), "not an object"], {}),
    ([_gpu(0)], {"interval_s": -1.0}),
    ([_gpu(0)], {"driver_version": "550.54.15"}),  # a payload key the typed read does not know
])
def test_odd_input_gets_the_general_verdict(gpus, data):
    raw = _message([{**g, "pcie_replay": 0} if isinstance(g, dict) and g["pcie_replay"] == 2**64 else g for g in gpus],
                   **data)
    if any(isinstance(g, dict) and g["pcie_replay"] == 2**64 for g in gpus):
        raw = raw.replace(b'"pcie_replay":0', b'"pcie_replay":%d' % 10**30)  # orjson writes no such integer
    typed, general = decode_gpu_message(raw), decode(raw)
    assert all(isinstance(g, dict) or not isinstance(g, Mapping) for g in typed.data["gpus"])  # general rows
    assert typed.data == general.data
    assert _verdict(typed) == _verdict(general)


@pytest.mark.parametrize("raw", [
    None,
    b"",
    b"{not json",
    b'{"v": 1, "id": "e1", "ts": 1790000000.0, "job": "llm", "node": "dgx-a17", "source": "gpu", "kind": "sample"}',
    orjson.dumps({"v": 1, "id": "e1", "ts": 17900000000000, "job": "llm", "node": "n", "source": "gpu",
                  "kind": "sample", "data": {"gpus": []}}),  # milliseconds, not seconds
    orjson.dumps({"v": 1, "id": "", "ts": T, "job": "llm", "node": "n", "source": "gpu", "kind": "sample",
                  "data": {"gpus": []}}),
    orjson.dumps({"v": 1, "id": "e1", "ts": T, "job": "llm", "node": "n", "source": "gpux", "kind": "sample",
                  "data": {"gpus": []}}),
    orjson.dumps([1, 2]),
    # integers past 64 bits (orjson reads them as floats)
    b'{"v": 100000000000000000000000, "id": "e1", "ts": 1790000000.0, "job": "llm", "node": "n", "source": "gpu",'
    b' "kind": "sample", "data": {"gpus": []}}',
    b'{"v": 1, "id": "e1", "ts": 100000000000000000000000, "job": "llm", "node": "n", "source": "gpu",'
    b' "kind": "sample", "data": {"gpus": []}}',
])
def test_a_bad_envelope_is_refused_as_the_general_decoding_refuses_it(raw):
    with pytest.raises(InvalidEvent) as general:
        decode(raw)
    with pytest.raises(InvalidEvent) as typed:
        decode_gpu_message(raw)
    assert str(typed.value) == str(general.value)


def test_other_kinds_of_the_gpu_topic_read_as_before():
    raw = orjson.dumps({"v": 1, "id": "x1", "ts": T, "job": "llm", "node": "dgx-a17", "source": "gpu", "kind": "xid",
                        "data": {"gpu": 3, "xid": 79, "fault": "gpu_lost", "action": "evict"}})
    assert decode_gpu_message(raw) == decode(raw)
    # A sample sent on the GPU topic by another source keeps its own source.
    raw = orjson.dumps({"v": 1, "id": "x2", "ts": T, "job": "llm", "node": "dgx-a17", "source": "host",
                        "kind": "sample", "data": {"gpus": []}})
    assert decode_gpu_message(raw) == decode(raw)


def _mutations(seed: int, n: int):
    """Seeded odd samples: a key's value swapped for another type, a key dropped or added, the
    bytes cut short or garbled."""
    import random
    rnd = random.Random(seed)
    odd = [None, True, -1, 2.5, 10**19, 1e299, "12", "nan", [], [1], {}, {"replay": 1}, ["hw_thermal"]]
    keys = list(_gpu(0))
    for _ in range(n):
        gpus = [_gpu(i) for i in range(rnd.randint(0, 3))]
        for g in gpus:
            for _ in range(rnd.randint(0, 2)):
                op, key = rnd.random(), rnd.choice(keys)
                if op < 0.6:
                    g[key] = rnd.choice(odd)
                elif op < 0.8:
                    g.pop(key, None)
                else:
                    g[f"x_{key}"] = rnd.choice(odd)
        yield damaged(_message(gpus), rnd)


def _outcome(read, raw):
    try:
        event = read(raw)
    except InvalidEvent as exc:
        return ("invalid", str(exc))
    table = gpu_table(event)
    return ("ok", _verdict(event), None if table is None else (table.numbers, table.index, table.uuid, table.throttle))


def test_odd_samples_get_the_same_outcome_either_way():
    for raw in _mutations(seed=13, n=400):
        assert _outcome(decode_gpu_message, raw) == _outcome(decode, raw), raw


def test_a_read_sample_is_freed_as_soon_as_it_is_dropped():
    # Half of all telemetry is NVML samples: one that only the cyclic collector can free piles up
    # in a long-running consumer (and costs a collection pass) instead of going at once.
    # Only our own objects are looked for among what the collector finds: other tests' threads
    # still running in this worker (a consumer closing) leave cycles of their own meanwhile.
    raw = _message([_gpu(i) for i in range(8)])
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(50):
            event = decode_gpu_message(raw)
            assert gpu_table(event) is not None and event.data["gpus"][3]["temp_c"] == _gpu(3)["temp_c"]
        del event
        gc.collect()
        ours = [o for o in gc.garbage if type(o).__module__.startswith("streams.")
                or (isinstance(o, dict) and ("temp_c" in o or "gpus" in o))]
        assert ours == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
