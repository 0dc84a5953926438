"""The base of the records on the bus that are not events (the command, the action record, the
diagnosis): msgspec Structs, so a record's fields are typed for the checker and read from a message
in C, written as the hand-written code wrote them, byte for byte (tests/events/test_record_bytes.py).

The bytes are orjson's over the record's builtins, not msgspec's own JSON: msgspec writes a float past
1e16 as ``1e16`` where orjson writes ``1e+16``, and a command's params may hold one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self, TypeVar, Union

import msgspec
import orjson

from faultlens.events.envelope import InvalidEvent, loads, require_fields
from faultlens.events.payload_fields import invalid

# A time or a duration as it was sent: an int stays an int, so a record read from the bus writes the
# bytes it was read from (a command's signature covers them: issued_at 1700000000 must not come back
# as 1700000000.0).
Seconds = Union[int, float]


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """A record on the bus. Subclasses name what a message must hold (``REQUIRED``, checked before the
    rest: a missing one is named) and what it is (``WHAT``, for the reasons)."""

    REQUIRED: ClassVar[tuple[str, ...]] = ()
    WHAT: ClassVar[str] = "a record"

    def to_dict(self) -> dict[str, Any]:
        """The record as a dict in field order, as the hand-written to_dict made it: tuples as lists,
        a dict copied (one level), enum members as they are (each equals and encodes as its name)."""
        out = msgspec.structs.asdict(self)
        for name, value in out.items():
            if type(value) is tuple:
                out[name] = list(value)
            elif type(value) is dict:
                out[name] = dict(value)
        return out

    def encode(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Any) -> Self:
        """``obj`` read as this record; InvalidEvent naming the field that is missing or wrong. A
        ``null`` where the record has a default reads as the default, as the payloads' do."""
        fields = require_fields(obj, cls.REQUIRED, cls.WHAT)
        return read_record(cls, _without_nulls(fields, cls.REQUIRED))

    @classmethod
    def decode(cls, raw: bytes | str | None) -> Self:
        return cls.from_dict(loads(raw))


def _without_nulls(obj: Mapping[str, Any], keep: Iterable[str]) -> Mapping[str, Any]:
    if None not in obj.values():
        return obj
    keep = set(keep)
    return {k: v for k, v in obj.items() if v is not None or k in keep}


R = TypeVar("R", bound=Record)


def read_record(cls: type[R], obj: Mapping[str, Any]) -> R:
    """``obj`` as ``cls``: numbers written as text read as numbers (``"inf"``, as the hand-written
    readers' float() read them); a check of the record's own (its ``__post_init__``) keeps its
    InvalidEvent, with the field it names."""
    try:
        return msgspec.convert(obj, cls, strict=False)
    except msgspec.ValidationError as exc:
        if isinstance(exc.__cause__, InvalidEvent):
            raise exc.__cause__ from None
        problem = invalid(exc)
        field = problem.field[len("data."):] if problem.field and problem.field.startswith("data.") else None
        raise InvalidEvent(field, f"{cls.WHAT}: {problem.reason}") from None
