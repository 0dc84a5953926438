"""Deferred reading (streams.intake): a message of a deferred topic is placed in event time from its
envelope alone and read whole when the merge lets it go. What comes out, and every refusal, must
be what reading it whole at once gives. Kafka-free: polled batches are built by hand."""

from __future__ import annotations

import time

import orjson
import pytest
from kafka.structs import TopicPartition

from faultlens.diagnosis.edge.consumer import TELEMETRY_DECODERS
from faultlens.events import topics
from faultlens.events.event_clock import EventClock
from faultlens.events.event_time import WatermarkMerge
from faultlens.events.typed_read import EnvelopeTime, read_envelope_time
from faultlens.streams.intake import Intake, peek_envelope_time
from faultlens.streams.kafka_client import Message
from faultlens.streams.runner.types import RunnerStats

T = 1_790_000_000.0
GPU_TP = TopicPartition(topics.GPU, 0)
TRAIN_TP = TopicPartition(topics.TRAIN, 0)


def _gpu_message(offset: int, **envelope) -> bytes:
    gpu = {"index": 0, "uuid": "GPU-0", "util": 97.0, "temp_c": 61.0, "power_w": 640.5, "power_limit_w": 700.0,
           "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "throttle": [], "ecc_dbe_volatile": 0,
           "ecc_dbe_aggregate": 0, "remap_uncorrectable": 0, "retired_pages_sbe": None, "retired_pages_dbe": None,
           "pcie_replay": 0, "mem_used_mb": 70000.0, "nvlink_errors": {"replay": 0}}
    e = {"v": 1, "id": f"g{offset}", "ts": T + offset, "job": "llm", "node": "dgx-a17", "source": "gpu",
         "kind": "sample", "data": {"gpus": [gpu], "interval_s": 1.0}}
    e.update(envelope)
    return orjson.dumps({k: v for k, v in e.items() if v is not _DROP})


_DROP = object()


def _train_message(offset: int) -> bytes:
    return orjson.dumps({"v": 1, "id": f"t{offset}", "ts": T + offset, "job": "llm", "node": "dgx-a17",
                         "source": "train", "kind": "step", "data": {"step": offset, "loss": 2.5}})


def _polled(gpu: list[bytes], train: list[bytes] = ()) -> dict:
    return {GPU_TP: [Message(GPU_TP.topic, 0, o, b"dgx-a17", raw, int((T + o) * 1000)) for o, raw in enumerate(gpu)],
            TRAIN_TP: [Message(TRAIN_TP.topic, 0, o, b"dgx-a17", raw, int((T + o) * 1000))
                       for o, raw in enumerate(train)]}


def _intake(deferred=(topics.GPU, topics.NET), clock=True, watermark_of=None) -> Intake:
    return Intake(TELEMETRY_DECODERS, 1 << 20, "g", RunnerStats(), EventClock() if clock else None,
                  WatermarkMerge(), watermark_of, deferred)


def _read(intake: Intake, polled) -> tuple[list, list]:
    """Split, then read whole what was deferred (as the runner does once the merge lets go)."""
    good, dead = intake.split(polled)
    return intake.complete(good, dead), dead


def _letter(out) -> dict:
    """A dead letter but for when it was written."""
    return {k: v for k, v in orjson.loads(out.value).items() if k != "ts"}


def _fields(r):
    return (r.topic, r.partition, r.offset, r.key, r.timestamp_ms, r.event_ts, r.skew_s, r.clamped, r.raw,
            r.value.to_dict())


def test_a_deferred_sample_is_placed_from_its_envelope_and_read_whole_on_release():
    polled = _polled([_gpu_message(o) for o in range(3)], [_train_message(o) for o in range(2)])
    held, _ = _intake().split(polled)
    gpu = [r for r in held if r.topic == topics.GPU]
    assert all(type(r.value) is EnvelopeTime for r in gpu)  # nothing of the payload built while held
    assert [r.event_ts for r in gpu] == [T, T + 1, T + 2]
    assert all(type(r.value) is not EnvelopeTime for r in held if r.topic == topics.TRAIN)
    deferred, dead_d = _read(_intake(), polled)
    at_once, dead_a = _read(_intake(deferred=()), polled)
    assert dead_d == dead_a == []
    assert [_fields(r) for r in deferred] == [_fields(r) for r in at_once]


def test_a_sender_clock_in_the_future_is_placed_the_same_either_way():
    polled = _polled([_gpu_message(0, ts=time.time() + 7200.0)])
    deferred, _ = _read(_intake(), polled)
    at_once, _ = _read(_intake(deferred=()), polled)
    assert deferred[0].clamped == at_once[0].clamped == "future"
    assert deferred[0].skew_s == pytest.approx(at_once[0].skew_s, abs=1.0)  # from the wall clock of each read
    assert _fields(deferred[0])[:6] + _fields(deferred[0])[7:] == _fields(at_once[0])[:6] + _fields(at_once[0])[7:]


@pytest.mark.parametrize("raw", [
    b"{not json",
    _gpu_message(0, ts="yesterday"),
    _gpu_message(0, ts=12.0),  # not a plausible epoch time
    _gpu_message(0, node=_DROP),
    _gpu_message(0, job=7),
], ids=["not-json", "ts-text", "ts-implausible", "no-node", "job-number"])
def test_an_envelope_that_cannot_be_placed_is_refused_at_once_with_the_usual_reason(raw):
    good, dead = _intake().split(_polled([raw, _gpu_message(1)]))
    _, dead_at_once = _intake(deferred=()).split(_polled([raw, _gpu_message(1)]))
    assert [_letter(d) for d in dead] == [_letter(d) for d in dead_at_once] and len(dead) == 1
    assert [r.offset for r in good] == [1]


@pytest.mark.parametrize("envelope", [{"id": _DROP}, {"v": 99}, {"source": "gpuz"}, {"data": [1, 2]}],
                         ids=["no-id", "version", "source", "data-list"])
def test_a_payload_refused_when_read_whole_is_a_dead_letter_on_release_and_its_neighbours_go_on(envelope):
    polled = _polled([_gpu_message(0), _gpu_message(1, **envelope), _gpu_message(2)])
    intake = _intake()
    held, dead = intake.split(polled)
    assert dead == [] and len(held) == 3  # placed by its envelope: refused only once read whole
    out: list = []
    released = intake.complete(held, out)
    _, dead_at_once = _intake(deferred=()).split(polled)
    assert [r.offset for r in released] == [0, 2]
    assert len(out) == 1 and _letter(out[0]) == _letter(dead_at_once[0])  # the same reason and bytes


def test_nothing_is_deferred_without_event_time_or_on_a_topic_of_watermarks():
    polled = _polled([_gpu_message(0)])
    for intake in (_intake(clock=False), _intake(watermark_of=lambda r: None)):
        good, _ = intake.split(polled)
        assert type(good[0].value) is not EnvelopeTime
        assert intake.complete(good, []) is good


@pytest.mark.parametrize("raw", [
    _gpu_message(0),
    _gpu_message(0, ts=int(T)),  # an integer time
    _gpu_message(0, ts=T + 0.123456789),
    _gpu_message(0, ts=1e300),  # out of bounds: no time
    _gpu_message(0, ts="yesterday"),
    _gpu_message(0, job=""),
    _gpu_message(0, node="dgx\u00e9"),  # not ASCII: the general peek
    _gpu_message(0, node='a"b'),  # an escape: the general peek
    _gpu_message(0, node=_DROP),
    _gpu_message(0, id=_DROP),
    b' ' + _gpu_message(0),
    _gpu_message(0).replace(b'"ts":', b'"ts" : '),
    orjson.dumps({"ts": T, "v": 1, "id": "x", "job": "llm", "node": "n", "data": {}}),  # another key order
    b'{"v":01,"id":"x","ts":1790000000.0,"job":"llm","node":"n","source":"gpu","data":{}}',  # not JSON
    b'{"v":1,"id":"x","ts":1790000000.0,"job":"llm","source":"gpu","node":"n","data":{}}',  # node after source
    b'{"v":1,"id":"x","data":{"a":1,"source":2},"ts":1790000000.0,"job":"j","node":"n","source":"gpu"}',  # nested
    b'{"v":1,"id":"x\\","ts":1790000000.0,"job":"j","node":"n","source":"gpu","data":{}}',  # an escaped backslash
    b'{"v":1,"id":"x\",\"source\":","ts":1790000000.0,"job":"j","node":"n","source":"gpu","data":{}}',
    b"{not json",
    None,
], ids=["plain", "int-ts", "long-ts", "ts-huge", "ts-text", "job-empty", "non-ascii", "escape", "no-node", "no-id",
        "space-first", "space-in", "other-order", "v-leading-zero", "node-after-source", "nested-source",
        "escaped-backslash", "escaped-quotes", "not-json", "none"])
def test_the_envelopes_first_keys_give_the_time_the_general_peek_gives(raw):
    assert peek_envelope_time(raw) == read_envelope_time(raw)


def test_a_payload_that_is_not_json_past_the_envelope_is_refused_on_release_with_the_usual_reason():
    raw = _gpu_message(1)[:-20]  # cut short: placed by its first keys, refused once read whole
    polled = _polled([_gpu_message(0), raw, _gpu_message(2)])
    intake = _intake()
    held, dead = intake.split(polled)
    assert dead == [] and [type(r.value) for r in held] == [EnvelopeTime] * 3
    out: list = []
    released = intake.complete(held, out)
    _, dead_at_once = _intake(deferred=()).split(polled)
    assert [r.offset for r in released] == [0, 2]
    assert len(out) == 1 and _letter(out[0]) == _letter(dead_at_once[0])


def test_an_envelope_key_stated_twice_is_placed_by_its_first_statement():
    """The one difference from the general peek (streams/intake.py's docstring): the prefix is read,
    not the payload after it. Read whole, the last statement holds, as it does at once."""
    raw = _gpu_message(0)[:-1] + b',"ts":' + str(T + 5).encode() + b"}"
    assert read_envelope_time(raw).ts == T + 5 and peek_envelope_time(raw).ts == T
    deferred, dead = _read(_intake(), _polled([raw]))
    assert dead == [] and deferred[0].event_ts == T and deferred[0].value.ts == T + 5
