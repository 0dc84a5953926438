"""Bundles (events/bundle.py): the node stage's passed-on events, several per message."""

from __future__ import annotations

import orjson
import pytest

from faultlens.events.bundle import Bundle, decode_bundled, pack
from faultlens.events.envelope import Envelope, InvalidEvent, encode

T0 = 1_767_225_600.0


def _step(i: int, node: str = "n001") -> Envelope:
    return Envelope(ts=T0 + i, job="j1", node=node, source="train", kind="step", id=f"s{i}",
                    data={"rank": i % 8, "step": i, "loss": "nan" if i == 3 else 2.0, "note": "ünïcode ✓"})


def test_a_bundle_gives_back_every_event_it_was_packed_with_in_order():
    events = [_step(i) for i in range(10)]
    [raw] = pack("j1", "member-1", T0 + 9, [encode(e) for e in events])
    got = decode_bundled(raw)
    assert isinstance(got, Bundle) and got.rejected == ()
    assert list(got.events) == events


def test_bundles_are_cut_before_they_grow_past_the_limit():
    encoded = [encode(_step(i)) for i in range(50)]
    raws = pack("j1", "member-1", T0, encoded, max_bytes=2000)
    assert len(raws) > 1 and all(len(r) < 2000 + 400 for r in raws)
    unpacked = [e for r in raws for e in decode_bundled(r).events]
    assert [encode(e) for e in unpacked] == encoded


def test_an_event_larger_than_the_limit_goes_alone():
    big = Envelope(ts=T0, job="j1", node="n1", source="nccl", kind="line", id="big", data={"line": "x" * 5000})
    raws = pack("j1", "m", T0, [encode(_step(1)), encode(big), encode(_step(2))], max_bytes=1000)
    assert [[e.id for e in decode_bundled(r).events] for r in raws] == [["s1"], ["big"], ["s2"]]


def test_a_plain_event_decodes_as_itself():
    e = _step(1)
    assert decode_bundled(encode(e)) == e


def test_a_bad_event_inside_a_bundle_is_rejected_alone():
    good = encode(_step(1))
    no_ts = orjson.dumps({k: v for k, v in orjson.loads(encode(_step(2))).items() if k != "ts"})
    [raw] = pack("j1", "m", T0, [good, no_ts, encode(_step(4))])
    got = decode_bundled(raw)
    assert [e.id for e in got.events] == ["s1", "s4"]
    [(item, reason)] = got.rejected
    assert orjson.loads(item)["id"] == "s2" and "ts" in reason


def test_a_bundle_without_a_list_of_events_is_invalid():
    raw = encode(Envelope(ts=T0, job="j1", node="m", source="summary", kind="bundle", data={"events": "nope"}))
    with pytest.raises(InvalidEvent, match="data.events"):
        decode_bundled(raw)


def test_a_bundle_inside_a_bundle_is_rejected():
    [inner] = pack("j1", "m", T0, [encode(_step(1))])
    [outer] = pack("j1", "m", T0, [inner, encode(_step(2))])
    got = decode_bundled(outer)
    assert [e.id for e in got.events] == ["s2"] and "inside a bundle" in got.rejected[0][1]


def _cut_one_by_one(encoded: list[bytes], max_bytes: int) -> list[list[bytes]]:
    """The bundles' contents as pack's loop cuts them, an event at a time (its rule before the
    one-bundle shortcut, issue 56)."""
    chunks: list[list[bytes]] = []
    chunk: list[bytes] = []
    size = 0
    for raw in encoded:
        if chunk and size + len(raw) > max_bytes:
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(raw)
        size += len(raw) + 1
    return chunks + [chunk] if chunk else chunks


@pytest.mark.parametrize("slack", [-2, -1, 0, 1, 2])
def test_one_bundle_exactly_where_the_event_by_event_cut_makes_one(slack: int) -> None:
    # At the limit, a byte either side: all but the last event with their commas, and the last, fit or not.
    encoded = [encode(_step(i)) for i in range(7)]
    limit = sum(map(len, encoded)) + len(encoded) - 1 + slack
    raws = pack("j1", "m", T0, encoded, max_bytes=limit)
    assert len(raws) == (1 if slack >= 0 else 2)
    got = [[encode(e) for e in decode_bundled(r).events] for r in raws]
    assert got == _cut_one_by_one(encoded, limit)
    assert pack("j1", "m", T0, [], max_bytes=limit) == []
