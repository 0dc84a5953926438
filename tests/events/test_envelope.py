import math

import orjson
import pytest

from faultlens.events.envelope import SCHEMA_VERSION, Envelope, InvalidEvent, as_float, decode, encode, number
from faultlens.events.topics import SOURCE_TOPIC, topic_for
from faultlens.events.topology import Topology


def make(**over):
    base = dict(ts=1_790_000_000.5, job="job-1", node="n001", source="kernel", kind="xid",
                data={"xid": 79, "pci": "0000:3b:00"})
    base.update(over)
    return Envelope(**base)


def test_round_trip_keeps_every_field():
    ev = make()
    back = decode(encode(ev))
    assert back == ev
    assert back.v == SCHEMA_VERSION
    assert len(back.id) == 32


def test_ids_are_unique():
    assert len({make().id for _ in range(1000)}) == 1000


def test_key_is_node_for_telemetry_and_job_for_job_records():
    assert make().key == b"n001"
    topo = Topology.grid(["n0", "n1"], 2, tp=2, pp=2, dp=1)
    assert topo.to_event("job-9", 1_790_000_000.0).key == b"job-9"


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("v", 0, "unsupported schema version"),
        ("v", SCHEMA_VERSION + 1, "unsupported schema version"),
        ("v", "1", "must be an int"),
        ("v", True, "must be an int"),
        ("id", "", "must not be empty"),
        ("id", 12, "must be a string"),
        ("ts", "yesterday", "must be a number"),
        ("ts", float("nan"), "not a plausible epoch time"),
        ("ts", 1_790_000_000_000.0, "not a plausible epoch time"),  # milliseconds, not seconds
        ("ts", True, "must be a number"),
        ("job", "", "must not be empty"),
        ("job", None, "must be a string"),
        ("node", "   ", "must not be empty"),
        ("node", "x" * 300, "too long"),
        ("source", "gpus", "unknown source"),
        ("kind", "", "must not be empty"),
        ("data", [1, 2], "must be an object"),
    ],
)
def test_invalid_field_is_named(field, value, message):
    with pytest.raises(InvalidEvent) as err:
        make(**{field: value})
    assert err.value.field == field
    assert message in str(err.value)


@pytest.mark.parametrize("missing", ["v", "id", "ts", "job", "node", "source", "kind", "data"])
def test_decode_names_the_missing_field(missing):
    obj = make().to_dict()
    del obj[missing]
    with pytest.raises(InvalidEvent) as err:
        decode(orjson.dumps(obj))
    assert err.value.field == missing
    assert "missing" in str(err.value)


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe\x00", b"[1,2]", b"42", b'"text"', None])
def test_decode_rejects_garbage_with_a_reason(raw):
    with pytest.raises(InvalidEvent) as err:
        decode(raw)
    assert str(err.value)


def test_nan_loss_survives_json_as_text():
    ev = make(source="train", kind="step", data={"loss": number(float("nan")), "grad_norm": number(float("inf"))})
    back = decode(encode(ev))
    assert math.isnan(as_float(back.data["loss"]))
    assert as_float(back.data["grad_norm"]) == math.inf
    assert as_float("garbage") is None and as_float(None) is None and as_float(True) is None


def test_every_source_has_a_topic():
    from faultlens.events.envelope import SOURCES

    assert set(SOURCE_TOPIC) == set(SOURCES)
    assert topic_for(make(source="gpu", kind="sample")) == "telemetry.gpu"


def test_topology_grid_groups_and_round_trip():
    nodes = [f"n{i:03d}" for i in range(4)]
    topo = Topology.grid(nodes, 8, tp=2, pp=4, dp=4)
    assert len(topo.ranks) == 32
    back = Topology.from_data(topo.to_event("j", 1_790_000_000.0).data)
    assert back.ranks == topo.ranks
    # a PP group is a pipeline: same tp and dp, all four stages
    gid = topo.group_id(31, "pp")
    members = topo.group_ranks("pp", gid)
    assert len(members) == 4
    assert {topo.by_rank[r].pp for r in members} == {0, 1, 2, 3}
    assert len({(topo.by_rank[r].tp, topo.by_rank[r].dp) for r in members}) == 1
    # every axis partitions the ranks
    for axis, size in (("tp", 2), ("pp", 4), ("dp", 4)):
        groups = topo.groups(axis)
        assert len(groups) == 32 // size
        assert sorted(r for g in groups for r in topo.group_ranks(axis, g)) == list(range(32))


@pytest.mark.parametrize(
    "data,field",
    [
        ({"tp": 2, "pp": 1, "dp": 1}, "data.ranks"),
        ({"tp": 0, "pp": 1, "dp": 1, "ranks": [{"rank": 0, "node": "a", "tp": 0, "pp": 0, "dp": 0}]}, "data.tp"),
        ({"tp": 1, "pp": 1, "dp": 1, "ranks": [{"rank": 0, "node": "a", "tp": 1, "pp": 0, "dp": 0}]}, "data.ranks"),
        ({"tp": 2, "pp": 1, "dp": 1, "ranks": [{"rank": 0, "node": "a", "tp": 0, "pp": 0, "dp": 0},
                                               {"rank": 0, "node": "a", "tp": 1, "pp": 0, "dp": 0}]}, "data.ranks"),
        ({"tp": 1, "pp": 1, "dp": 1, "ranks": [{"rank": "x", "node": "a"}]}, "data.ranks[0]"),
    ],
)
def test_bad_topology_is_rejected_with_the_field(data, field):
    with pytest.raises(InvalidEvent) as err:
        Topology.from_data(data)
    assert err.value.field == field
