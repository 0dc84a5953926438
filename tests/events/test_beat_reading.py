"""The typed read of a heartbeat (events.beat_reading) gives what the general decoding and the
payload check give: the same envelope and data, the same HeartbeatBeat (values and their types),
and the same verdict (dead-letter reason) on odd input."""

import json
import random

import msgspec
import orjson
import pytest

from faultlens.events.beat import beat_event
from faultlens.events.beat_reading import decode_beat_message
from faultlens.events.envelope import InvalidEvent, decode, encode
from faultlens.events.payloads import check_payload, typed
from faultlens.events.payloads_job import HeartbeatBeat
from tests.events.damaged import damaged

T = 1_790_000_000.0
# A beat as the node agent writes it (collectors/heartbeat.py through events/beat.py), no health report.
BEAT = {"seq": 41, "pids": [1000, 1001, 1002], "sources": {"nvml": "ok", "kernel": "ok"}}


def _message(data: dict | None = None, *, envelope: dict | None = None, **over) -> bytes:
    return json.dumps({"v": 1, "id": "b1", "ts": T, "job": "llm", "node": "dgx-a17", "source": "heartbeat",
                       "kind": "beat", "data": {**(BEAT if data is None else data), **over}, **(envelope or {})},
                      ensure_ascii=False, separators=(",", ":")).encode()


def _outcome(read, raw):
    try:
        event = read(raw)
    except InvalidEvent as exc:
        return ("invalid", str(exc))
    try:
        check_payload(event)
    except InvalidEvent as exc:
        return ("ok", event.to_dict(), "refused", str(exc))
    payload = None
    if (event.source, event.kind) == ("heartbeat", "beat"):
        payload = tuple((v, type(v)) for v in msgspec.structs.astuple(typed(event, HeartbeatBeat)))
    return ("ok", event.to_dict(), sorted((k, type(v).__name__) for k, v in event.data.items()), payload)


def test_a_plain_beat_reads_as_the_general_decoding_does_and_is_not_checked_again(monkeypatch):
    raw = encode(beat_event(job="llm", node="dgx-a17", seq=7, pids=[3, 1, 2], sources={"nvml": "ok"}, ts=T,
                            unranked_pids=[9], stopping=True))
    fast, general = decode_beat_message(raw), decode(raw)
    assert fast == general and fast.data["pids"] == [1, 2, 3]
    assert _outcome(decode_beat_message, raw) == _outcome(decode, raw)
    assert orjson.loads(encode(fast)) == orjson.loads(raw)
    from faultlens.events import payloads
    fast = decode_beat_message(raw)
    monkeypatch.setattr(payloads, "convert", lambda *a, **k: pytest.fail("read twice"))
    check_payload(fast)
    assert typed(fast, HeartbeatBeat).seq == 7


ODD = [
    _message(), _message({}), _message({"seq": 0}), _message(seq=None), _message(pids=None), _message(sources=None),
    _message(seq=-1), _message(seq=2**63 - 1), _message(seq=2**63), _message(seq=10**30), _message(seq=True),
    _message(seq=1.0), _message(seq="3"), _message(pids=[]), _message(pids=[1, None]), _message(pids=[1.5]),
    _message(pids=["1"]), _message(pids=[True]), _message(pids=[2**64]), _message(pids=7), _message(pids={}),
    _message(sources={}), _message(sources={"nvml": 1}), _message(sources={"nvml": None}), _message(sources=[]),
    _message(sources={"nvml": {"status": "ok"}}), _message(sources="ok"),
    _message(unranked_pids=[5]), _message(unranked_pids=None), _message(unranked_pids="5"),
    _message(health={"lag_s": 0.5, "down": []}), _message(health=None), _message(health=[]), _message(health=3),
    _message(stopping=True), _message(stopping=False), _message(stopping=None), _message(stopping=1),
    _message(stopping="yes"), _message(extra=1), _message(note="é"),
    _message(envelope={"ts": 1_790_000_000}), _message(envelope={"ts": 10**30}), _message(envelope={"v": 2}),
    _message(envelope={"id": ""}), _message(envelope={"job": " x"}), _message(envelope={"node": 7}),
    _message(envelope={"kind": "beep"}), _message(envelope={"source": "host"}), _message(envelope={"trace": 1}),
    _message(envelope={"data": None}), _message(envelope={"data": [1]}),
    _message().replace(b'"seq":41', b'"seq":41,"seq":42', 1),  # a key twice
    _message().replace(b'"nvml":"ok"', b'"nvml":"ok","nvml":"lost"', 1),  # a source twice
    _message().replace(b'"v":1,', b"", 1), _message()[:90], _message().replace(b'"llm"', b'"ll\xff"'),
    _message().replace(b'"ok"', b'"\\u00e9"', 1),  # an escaped letter that is not ASCII once read
    None, b"", b"[]", b"null",
]


@pytest.mark.parametrize("raw", ODD)
def test_odd_input_gets_the_general_verdict(raw):
    assert _outcome(decode_beat_message, raw) == _outcome(decode, raw)


def test_some_odd_input_is_refused_and_some_kept():
    """The list above holds real dead letters and real acceptances (no comparison of two refusals only)."""
    outcomes = [_outcome(decode, raw) for raw in ODD]
    assert sum(o[0] == "invalid" or o[2] == "refused" for o in outcomes) >= 15
    assert sum(o[0] == "ok" and o[2] != "refused" for o in outcomes) >= 20


def test_seeded_odd_beats_get_the_general_verdict():
    rnd = random.Random(56)
    odd = [None, True, False, -1, 0, 2.5, 2**63, "12", [], [1, None], {}, {"a": "b"}, {"a": 1}]
    keys = list(BEAT) + ["unranked_pids", "health", "stopping", "extra"]
    for _ in range(400):
        data = dict(BEAT)
        for _ in range(rnd.randint(0, 3)):
            if rnd.random() < 0.6:
                data[rnd.choice(keys)] = rnd.choice(odd)
            elif data:
                del data[rnd.choice(list(data))]
        raw = damaged(_message(data), rnd)
        assert _outcome(decode_beat_message, raw) == _outcome(decode, raw), raw
