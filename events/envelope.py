"""The event envelope of docs/design.md §2: one typed, validated record per Kafka message.

Every producer (collectors, simulator, trainer hooks) builds an :class:`Envelope`; every consumer
gets one back from :func:`decode`, which names the bad field instead of raising a bare KeyError,
so a consumer can dead-letter the message with a reason and go on.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import orjson

SCHEMA_VERSION = 1


class Source(StrEnum):
    """Who sent an event (docs/events.md). A member equals its string (``Source.GPU == "gpu"``), so
    comparisons with the names and the JSON stay as they were."""

    GPU = "gpu"
    KERNEL = "kernel"
    NCCL = "nccl"
    TRAIN = "train"
    STACK = "stack"
    HEARTBEAT = "heartbeat"
    HOST = "host"
    # Job-level records (topology, restarts).
    JOB = "job"
    # The node stage's compact per-node window summaries and node-local findings to the job stage
    # (docs/design.md §1, scaling out).
    SUMMARY = "summary"
    CHECK = "check"
    NET = "net"


# The names as plain strings (a set lookup of an event's source is on every message's path).
SOURCES = frozenset(s.value for s in Source)

# Envelope fields in the order they are written, so traces and dumps read alike.
FIELDS = ("v", "id", "ts", "job", "node", "source", "kind", "data")

# Events carry clock times; anything outside these years is a unit bug (ms vs s) or garbage.
_MIN_TS = 946684800.0  # 2000-01-01
_MAX_TS = 4102444800.0  # 2100-01-01


class InvalidEvent(ValueError):
    """A message that is not a valid envelope; ``field`` names what is wrong (``None``: the whole)."""

    def __init__(self, field_name: str | None, reason: str):
        self.field = field_name
        self.reason = reason
        super().__init__(f"{field_name}: {reason}" if field_name else reason)


def new_id() -> str:
    """A unique event id (random, 32 hex chars); producers that need determinism pass their own."""
    return uuid.UUID(bytes=os.urandom(16), version=4).hex


def _check_text(name: str, value: Any, *, allow_empty: bool = False) -> None:
    if not isinstance(value, str):
        raise InvalidEvent(name, f"must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise InvalidEvent(name, "must not be empty")
    if len(value) > 256:
        raise InvalidEvent(name, f"too long ({len(value)} chars, limit 256)")


def _plain_text(value: Any) -> bool:
    """A name _check_text certainly accepts: a string of 1..256 chars that starts with no blank."""
    return type(value) is str and 0 < len(value) <= 256 and not value[0].isspace()


_DEFAULT: Any = object()


@dataclass(frozen=True, slots=True, kw_only=True, init=False)
class Envelope:
    """One event. ``data`` is the kind-specific payload, documented beside its producer."""

    ts: float
    job: str
    node: str
    source: str
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    v: int = SCHEMA_VERSION
    # The typed payload (a Struct of events/payloads_node.py or payloads_job.py), read once from
    # ``data`` by the payload check and kept here: events.payloads.typed(event, Struct) gives it. Not part
    # of the event (its value, its equality).
    _payload: Any = field(default=None, init=False, repr=False, compare=False)

    def __init__(self, *, ts: float, job: str, node: str, source: str, kind: str,
                 data: Mapping[str, Any] = _DEFAULT, id: str = _DEFAULT, v: int = SCHEMA_VERSION) -> None:
        # The fields are set through their slots: a frozen dataclass's own __init__ sets each
        # through object.__setattr__, which doubled the cost of an event read (one per message).
        _set_ts(self, ts)
        _set_job(self, job)
        _set_node(self, node)
        _set_source(self, source)
        _set_kind(self, kind)
        _set_data(self, {} if data is _DEFAULT else data)
        _set_id(self, new_id() if id is _DEFAULT else id)
        _set_v(self, v)
        _set_payload(self, None)
        self.__post_init__()

    def __post_init__(self) -> None:
        # Nearly every event is plainly valid: checked in one pass; anything unusual is looked at
        # closely below, which names the field.
        ts = self.ts
        if (type(self.v) is int and 1 <= self.v <= SCHEMA_VERSION and (type(ts) is float or type(ts) is int)
                and _MIN_TS <= ts <= _MAX_TS and self.source in SOURCES and type(self.data) is dict
                and _plain_text(self.id) and _plain_text(self.job) and _plain_text(self.node)
                and _plain_text(self.kind)):
            return
        self._check()

    def _check(self) -> None:
        if not isinstance(self.v, int) or isinstance(self.v, bool):
            raise InvalidEvent("v", f"must be an int, got {type(self.v).__name__}")
        if self.v < 1 or self.v > SCHEMA_VERSION:
            raise InvalidEvent("v", f"unsupported schema version {self.v} (this build reads 1..{SCHEMA_VERSION})")
        _check_text("id", self.id)
        if isinstance(self.ts, bool) or not isinstance(self.ts, (int, float)):
            raise InvalidEvent("ts", f"must be a number of seconds since the epoch, got {type(self.ts).__name__}")
        if not math.isfinite(self.ts) or not (_MIN_TS <= self.ts <= _MAX_TS):
            raise InvalidEvent("ts", f"{self.ts!r} is not a plausible epoch time in seconds")
        _check_text("job", self.job)
        _check_text("node", self.node)
        if self.source not in SOURCES:
            raise InvalidEvent("source", f"unknown source {self.source!r} (one of {', '.join(sorted(SOURCES))})")
        _check_text("kind", self.kind)
        if not isinstance(self.data, Mapping):
            raise InvalidEvent("data", f"must be an object, got {type(self.data).__name__}")

    @property
    def key(self) -> bytes:
        """Kafka key: the node keeps per-node order; job-level records are keyed by job."""
        return (self.job if self.source in ("job", "summary") else self.node).encode()

    def retimed(self, ts: float) -> "Envelope":
        """The same event placed at ``ts`` (a skewed clock's event moved into the job's time); a
        step read as events.step_reading.StepEvent has the same method, so a reader never asks which."""
        return replace(self, ts=ts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": self.v,
            "id": self.id,
            "ts": self.ts,
            "job": self.job,
            "node": self.node,
            "source": self.source,
            "kind": self.kind,
            "data": dict(self.data),
        }

    @classmethod
    def from_dict(cls, obj: Any) -> "Envelope":
        if type(obj) is not dict:
            obj = require_fields(obj, FIELDS, "an event")
        try:  # every field present: the common case, without a search for the missing one
            return cls(v=obj["v"], id=obj["id"], ts=obj["ts"], job=obj["job"], node=obj["node"],
                       source=obj["source"], kind=obj["kind"], data=obj["data"])
        except KeyError:
            require_fields(obj, FIELDS, "an event")  # InvalidEvent naming the first missing field
            raise


def require_fields(obj: Any, fields: Iterable[str], what: str) -> Mapping[str, Any]:
    """``obj`` as a mapping holding every one of ``fields``; else InvalidEvent naming the first gap.
    Every record read from a topic (event, diagnosis, command) is checked through here."""
    if not isinstance(obj, Mapping):
        raise InvalidEvent(None, f"{what} must be a JSON object, got {type(obj).__name__}")
    for name in fields:
        if name not in obj:
            raise InvalidEvent(name, "missing")
    return obj


def loads(raw: bytes | str | None) -> Any:
    """The JSON value of one message; InvalidEvent for a tombstone or text that is not JSON."""
    if raw is None:
        raise InvalidEvent(None, "empty message (tombstone or null value)")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(None, f"not valid JSON: {exc}") from None


def encode(event: Envelope) -> bytes:
    """UTF-8 JSON. JSON has no NaN: producers pass non-finite numbers through :func:`number`."""
    return orjson.dumps(event.to_dict(), default=_default, option=orjson.OPT_SERIALIZE_NUMPY)


_set_ts, _set_job, _set_node, _set_source, _set_kind, _set_data, _set_id, _set_v, _set_payload = (
    Envelope.__dict__[name].__set__ for name in ("ts", "job", "node", "source", "kind", "data", "id", "v", "_payload"))


_new = object.__new__


def checked_envelope(v: int, id: str, ts: float, job: str, node: str, source: str, kind: str,
                     data: dict[str, Any]) -> Envelope:
    """An envelope whose every field was checked as it was parsed, exactly as :meth:`Envelope.__post_init__`'s
    one-pass check would (events/typed_read.py: a version, a plausible time, names of 1..256
    characters none of which starts with a blank, a known source, a dict): built without checking them
    again, which was two thirds of building one (issue 56)."""
    event = _new(Envelope)
    _set_ts(event, ts)
    _set_job(event, job)
    _set_node(event, node)
    _set_source(event, source)
    _set_kind(event, kind)
    _set_data(event, data)
    _set_id(event, id)
    _set_v(event, v)
    _set_payload(event, None)
    return event


def keep_payload(event: Envelope, payload: Any) -> None:
    """Keep ``payload`` as ``event``'s typed payload (events.payloads, which read it)."""
    _set_payload(event, payload)


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Mapping):  # a typed row that reads as a dict (events.gpu_reading)
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__} in an event")


def decode(raw: bytes | str | None) -> Envelope:
    """Parse one message value; raises :class:`InvalidEvent` naming the problem."""
    return Envelope.from_dict(loads(raw))


def number(value: float | int | None) -> float | int | str | None:
    """A payload number that survives JSON: a NaN loss is a real signal, so it travels as 'nan'."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def as_float(value: Any) -> float | None:
    """Payload numbers may arrive as 'nan'/'inf' strings (JSON has no NaN): read them back."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None
