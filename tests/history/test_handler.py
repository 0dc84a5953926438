"""The history handler without a broker: what it returns to the runner, and when it refuses to go on."""

from __future__ import annotations

import math

import orjson
import pytest

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.history.consumer import HistoryHandler, StoreUnavailable
from faultlens.history.schema import memory_history
from faultlens.history.sink import HistorySink
from faultlens.streams.runner.loop import DEAD_LETTER_TOPIC, Record
from tests.history import known


def _records(values) -> list[Record]:
    return [Record("diagnoses", 0, i, b"j1", v, 0) for i, v in enumerate(values)]


def test_refused_record_becomes_a_dead_letter_and_the_rest_is_stored():
    conn = memory_history()
    bad = Diagnosis(id="bad", job="j1", ts=known.T0, onset=math.nan, fault="unknown", action="none")
    out = HistoryHandler(HistorySink(conn)).handle(_records([known.D1, bad, known.D2]))
    assert [o.topic for o in out] == [DEAD_LETTER_TOPIC]
    body = orjson.loads(out[0].value)
    assert body["offset"] == 1 and body["reason"] == "history: onset is not finite: nan"
    assert orjson.loads(body["value"])["id"] == "bad"
    assert conn.execute("SELECT list(id ORDER BY id) FROM diagnoses").fetchone()[0] == ["d1", "d2"]


def test_a_broken_store_stops_the_runner_instead_of_dead_lettering():
    conn = memory_history()
    handler = HistoryHandler(HistorySink(conn))
    conn.close()
    with pytest.raises(StoreUnavailable):
        handler.handle(_records([known.D1]))
