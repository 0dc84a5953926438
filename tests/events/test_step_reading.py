"""The typed read of a training step (events.step_reading) gives what the general decoding and the
payload check give: the same envelope and data, the same TrainStep (values and their types), and
the same verdict (dead-letter reason) on odd input."""

import json
import random

import msgspec
import orjson
import pytest

from faultlens.events.envelope import InvalidEvent, decode, encode
from faultlens.events.payloads import check_payload, typed
from faultlens.events.payloads_job import TrainStep
from faultlens.events.step_reading import StepEvent, decode_train_message
from tests.events.damaged import damaged

T = 1_790_000_000.0
# One rank's step as trainer_hooks write it (bench/bench_floor.py's held-out backlog writes the same keys).
STEP = {"rank": 3, "step": 1200, "loss": 2.4713, "grad_norm": 0.8125, "step_time_s": 0.95, "compute_s": 0.665,
        "tokens": 65536, "tokens_per_s": 68985.26315789473, "mfu": 0.41}


def _message(data: dict | None = None, *, envelope: dict | None = None, **over) -> bytes:
    return json.dumps({"v": 1, "id": "s1", "ts": T, "job": "llm", "node": "dgx-a17", "source": "train",
                       "kind": "step", "data": {**(STEP if data is None else data), **over}, **(envelope or {})},
                      ensure_ascii=False, separators=(",", ":")).encode()


def _payload(event) -> tuple:
    """The event's TrainStep, each value with its type (1 == 1.0, but a rule may tell them apart)."""
    step = typed(event, TrainStep)
    return tuple((v, type(v)) for v in msgspec.structs.astuple(step))


def _outcome(read, raw):
    try:
        event = read(raw)
    except InvalidEvent as exc:
        return ("invalid", str(exc))
    try:
        check_payload(event)
    except InvalidEvent as exc:
        return ("ok", event.to_dict(), "refused", str(exc))
    payload = _payload(event) if (event.source, event.kind) == ("train", "step") else None
    return ("ok", event.to_dict(), sorted((k, type(v).__name__) for k, v in event.data.items()), payload)


def test_a_plain_step_reads_as_the_general_decoding_does_and_is_not_checked_again(monkeypatch):
    raw = _message()
    fast, general = decode_train_message(raw), decode(raw)
    assert type(fast) is StepEvent  # the slim record, not an Envelope
    assert fast.to_dict() == general.to_dict() and fast.data == STEP and fast.key == general.key
    assert _outcome(decode_train_message, raw) == _outcome(decode, raw)
    assert orjson.loads(encode(fast)) == orjson.loads(raw)  # a re-encoding loses nothing
    from faultlens.events import payloads
    fast = decode_train_message(raw)
    monkeypatch.setattr(payloads, "convert", lambda *a, **k: pytest.fail("read twice"))
    check_payload(fast)
    assert typed(fast, TrainStep).loss == 2.4713


ODD = [
    _message({}),
    _message({"rank": 0}),
    _message(loss=None, grad_norm=None),  # null stays null in data
    _message(loss="nan"), _message(loss="NaN"), _message(grad_norm="inf"), _message(loss="-Infinity"),
    _message(loss=" nan "),
    _message(loss="2.5"), _message(loss="lots"),  # text that is no non-finite number
    _message(loss=3), _message(loss=-0.5), _message(loss=1e308), _message(loss=2**63 - 1),
    _message(loss=2**63), _message(loss=2**64), _message(loss=10**30),  # past 64 bits: the general way decides
    _message(rank=-1), _message(rank=True), _message(rank=1.0), _message(rank="3"), _message(rank=2**63),
    _message(step=-5), _message(step=None), _message(classes=50257), _message(classes=0), _message(classes=-2),
    _message(tokens=-1), _message(tokens=1.5), _message(tokens=10**30), _message(mfu=-0.0),
    _message(step_time_s=[1]), _message(compute_s={}), _message(tokens_per_s="fast"),
    _message(from_scratch=True), _message(from_scratch=1), _message(from_scratch=None),
    _message(lr=3e-4),  # a key TrainStep does not name: kept in data by the general reading
    _message(loss_steps=10), _message(loss_steps=0), _message(loss_steps=-1), _message(loss_steps=1.5),
    _message(envelope={"ts": 1_790_000_000}),  # an integer time
    _message(envelope={"ts": 1_790_000_000_000}),  # milliseconds
    _message(envelope={"ts": 10**30}), _message(envelope={"v": 2}), _message(envelope={"v": 10**30}),
    _message(envelope={"id": ""}), _message(envelope={"job": " x"}), _message(envelope={"node": 7}),
    # the envelope checks the typed read makes as it parses (events/typed_read.py), at their edges
    _message(envelope={"ts": 946_684_800}), _message(envelope={"ts": 946_684_799}),
    _message(envelope={"ts": 4_102_444_800}), _message(envelope={"ts": 4_102_444_801}),
    _message(envelope={"ts": 946_684_800.0}), _message(envelope={"ts": 946_684_799.999}),
    _message(envelope={"ts": 4_102_444_800.0}), _message(envelope={"ts": 4_102_444_800.001}),
    _message(envelope={"ts": True}), _message(envelope={"ts": "1790000000"}),
    _message(envelope={"v": 0}), _message(envelope={"v": True}), _message(envelope={"v": 1.0}),
    _message(envelope={"id": "x" * 256}), _message(envelope={"id": "x" * 257}), _message(envelope={"id": " "}),
    _message(envelope={"node": "\tn"}), _message(envelope={"job": "j "}), _message(envelope={"id": " s1"}),
    _message().replace(b'"dgx-a17"', b'"\\u3000dgx"'),  # an escaped blank that is not ASCII once read
    _message().replace(b'"dgx-a17"', b'"\\u00e9dgx"'),  # an escaped letter that is not ASCII once read
    _message(envelope={"kind": "checkpoint"}), _message({"rank": 1, "step": 9, "path": "/ckpt/9"},
                                                       envelope={"kind": "checkpoint"}),
    _message(envelope={"kind": "command_ack"}), _message(envelope={"kind": "stepped"}),
    _message(envelope={"source": "nccl"}), _message(envelope={"trace": "x"}),
    _message(envelope={"data": None}), _message(envelope={"data": [1]}),
    _message(note="é"),  # not ASCII
    _message().replace(b'"rank":3', b'"rank":3,"rank":4', 1),  # a key twice
    _message().replace(b'"v":1,', b"", 1),  # an envelope key left out
    _message()[:120],  # cut short
    _message().replace(b'"llm"', b'"ll\xff"'),  # a byte that is not UTF-8
    None, b"", b"[]", b"null",
]


@pytest.mark.parametrize("raw", ODD)
def test_odd_input_gets_the_general_verdict(raw):
    assert _outcome(decode_train_message, raw) == _outcome(decode, raw)


def test_some_odd_input_is_refused_and_some_kept():
    """The list above holds real dead letters and real acceptances (no comparison of two refusals only)."""
    outcomes = [_outcome(decode, raw) for raw in ODD]
    assert sum(o[0] == "invalid" or o[2] == "refused" for o in outcomes) >= 25
    assert sum(o[0] == "ok" and o[2] != "refused" for o in outcomes) >= 20


def _mutations(seed: int, n: int):
    """Seeded odd steps: a value swapped for another type, a key dropped or added, the bytes cut
    short or garbled."""
    rnd = random.Random(seed)
    odd = [None, True, False, -1, 0, 2.5, -0.0, 2**63, 10**20, 1e300, "12", "nan", "inf", [], {}, {"x": 1}]
    keys = list(STEP) + ["classes", "from_scratch", "extra"]
    for _ in range(n):
        data = dict(STEP)
        for _ in range(rnd.randint(0, 3)):
            op = rnd.random()
            if op < 0.6:
                data[rnd.choice(keys)] = rnd.choice(odd)
            elif data:
                del data[rnd.choice(list(data))]
        yield damaged(_message(data), rnd)


def test_seeded_odd_steps_get_the_general_verdict():
    for raw in _mutations(56, 400):
        assert _outcome(decode_train_message, raw) == _outcome(decode, raw), raw


def test_a_step_record_keeps_nulls_and_unknown_keys_in_data_and_is_retimed_as_an_envelope_is():
    """``data`` is read from the bytes when asked (a null sent stays null, an unknown key stays), and
    ``retimed`` moves a step as Envelope.retimed moves one: the same event at another time."""
    raw = _message(mfu=None, extra="kept")
    fast, general = decode_train_message(raw), decode(raw)
    assert type(fast) is StepEvent and fast.data == general.data and fast.data["mfu"] is None
    assert fast.data["extra"] == "kept"
    moved, moved_general = fast.retimed(T + 5.0), general.retimed(T + 5.0)
    assert moved.ts == moved_general.ts == T + 5.0 and moved.to_dict() == moved_general.to_dict()
    assert typed(moved, TrainStep) is typed(fast, TrainStep)  # the payload travels with it, not read again
    assert orjson.loads(encode(moved)) == {**orjson.loads(raw), "ts": T + 5.0}
