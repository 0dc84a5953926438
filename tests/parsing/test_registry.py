"""LineEventParser (parsing.registry): raw ``line`` events in, parsed events out, one parser per
(job, node, source); a line event's data may be any mapping, and one without a string line is refused."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from bench.testbed import log_samples as S
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.parsing.registry import LineEventParser


def _line(data, node="n001", i=0) -> Envelope:
    return Envelope(ts=1.8e9 + i, job="j", node=node, source="kernel", kind="line", data=data, id=f"r{i}")


def test_a_line_is_read_from_a_dict_or_any_mapping():
    by_dict = LineEventParser().parse(_line({"line": S.XID_79}))
    by_mapping = LineEventParser().parse(_line(MappingProxyType({"line": S.XID_79})))
    assert [e.kind for e in by_dict] == [e.kind for e in by_mapping] and by_dict
    assert [e.data for e in by_dict] == [e.data for e in by_mapping]
    assert by_dict[0].id == "r0.0" and by_dict[0].node == "n001"


@pytest.mark.parametrize("data", [{}, {"line": 7}, MappingProxyType({"line": None})])
def test_a_line_event_without_a_string_line_is_refused(data):
    with pytest.raises(InvalidEvent):
        LineEventParser().parse(_line(data))


def test_other_events_pass_through_and_nodes_keep_their_own_parser():
    lp = LineEventParser()
    other = Envelope(ts=1.8e9, job="j", node="n001", source="gpu", kind="sample", data={"gpu": 0})
    assert lp.parse(other) == [other]
    lp.parse(_line({"line": S.XID_79}, "n001", 1))
    lp.parse(_line({"line": S.XID_79}, "n002", 2))
    assert set(lp.streams) == {("j", "n001", "kernel"), ("j", "n002", "kernel")}
