"""The value types of event payloads (docs/events.md) and the base of every payload Struct.

A payload Struct (events/payloads_node.py, events/payloads_job.py) is read from an event's
``data`` by ``msgspec.convert``, which checks each field against these types in C. The rules are
the ones the bus has always had:

- a key that is absent or ``null`` passes (the driver may not report a field; the detector that
  needs a key says so itself): every field is optional, ``None`` by default;
- a key present with the wrong type (``rank`` a string, ``loss`` an object, ``true`` where a
  number goes), a negative count or interval, or a non-finite number where a measurement goes is
  refused, and :func:`invalid` turns msgspec's error into an :class:`InvalidEvent` naming the
  field (``data.<key>``), so the event becomes a dead letter with that reason;
- unknown keys are allowed (forward compatibility): msgspec skips them, ``data`` keeps them.
"""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any, Union

import msgspec

from faultlens.events.envelope import InvalidEvent

_MAX = sys.float_info.max  # a float bound refuses NaN (no comparison holds) and the infinities

# A bool is no number here: msgspec never takes true for an int or a float.
Int = int
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
# A finite number. An int however large is finite (Python's int has no infinity).
Number = Union[int, Annotated[float, msgspec.Meta(ge=-_MAX, le=_MAX)]]
# A finite number that is not negative: an interval, a duration, a rate, a count of tokens.
NonNeg = Union[NonNegInt, Annotated[float, msgspec.Meta(ge=0, le=_MAX)]]
# A training metric (loss, grad norm): any number, NaN and infinities included (a NaN loss is the
# signal), or the text events.envelope.number writes for a non-finite one (JSON has no NaN).
NonFiniteText = Annotated[str, msgspec.Meta(pattern=r"(?i)^\s*(nan|[+-]?inf|-?infinity)\s*$")]
Metric = Union[int, float, NonFiniteText]
Text = str
Flag = bool
# Any JSON object (a map the payload documents by example: a heartbeat's ``sources``, ``health``).
Object = dict
# Ints within 64 bits, the widest msgspec bounds (orjson reads an int up to 2**64 - 1, a float past
# it): the types above so bounded, for a payload msgspec also reads straight from the bytes
# (events/typed_read.py's readers, events/step_reading.py), so that the two readings of one message
# give the same value or the same refusal (msgspec alone reads 2**64 as an int).
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
NonNegInt64 = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
NonNeg64 = Union[NonNegInt64, Annotated[float, msgspec.Meta(ge=0, le=_MAX)]]
Metric64 = Union[Int64, float, NonFiniteText]


class Payload(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """The base of every payload Struct: keyword fields, immutable, and not tracked by the cyclic
    garbage collector (a payload holds only what JSON decodes to, so it is never in a cycle)."""


class RankedPayload(Payload, frozen=True):
    """A payload of one training rank (trainer, NCCL and stack events)."""

    rank: NonNegInt | None = None


_PATH = re.compile(r"^(.*) - at `\$\.([A-Za-z_]\w*)(.*)`$", re.DOTALL)


def invalid(exc: msgspec.ValidationError) -> InvalidEvent:
    """msgspec's ``Expected `int | null`, got `str` - at `$.gpus[1].index``` as an
    InvalidEvent naming the payload key (``data.gpus``), the rest of the path and the problem in
    its reason (``[1].index: Expected `int | null`, got `str```)."""
    text = str(exc)
    m = _PATH.match(text)
    if m is None:
        return InvalidEvent("data", text)
    problem, key, rest = m.groups()
    rest = rest.lstrip(".")
    return InvalidEvent(f"data.{key}", f"{rest}: {problem}" if rest else problem)


def convert(data: Any, payload_type: type[Payload], *, from_attributes: bool = False) -> Payload:
    """``data`` read as ``payload_type``; InvalidEvent naming the field where a value is wrong.
    ``from_attributes``: objects in it may be Structs read by a typed reader (events/gpu_reading.py's
    rows), read by their attributes (it costs a third more on plain JSON objects, so only then)."""
    try:
        return msgspec.convert(data, payload_type, from_attributes=from_attributes)
    except msgspec.ValidationError as exc:
        raise invalid(exc) from None
