"""The envelope of a message read straight from its bytes into typed structs (msgspec), shared by
the typed readers of the two biggest samples (events/gpu_reading.py, events/net_reading.py).

A typed reader only ever *accepts* faster: whatever its structs refuse, and any message that is
not ASCII (msgspec does not check the UTF-8 of what it skips, where the general reading refuses
a message with any byte that is not UTF-8), is read by :func:`events.envelope.decode`, so it gets
the same verdict and the same dead-letter reason as it would there.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Union

import msgspec

from faultlens.events.envelope import (
    _MAX_TS,
    _MIN_TS,
    SCHEMA_VERSION,
    Envelope,
    checked_envelope,
    decode,
    keep_payload,
)

# (Int64, NonNegInt64: what orjson reads as an int, up to 64 bits; past them the general reading
# decides, with the reason it gives. The readers of this module's callers import them from here.)
from faultlens.events.payload_fields import Int64, NonNegInt64  # noqa: F401

# The envelope's fields as Envelope's one-pass check takes them (events/envelope.py), checked by
# msgspec as they are parsed; a name's first character is tested in Python (a pattern in msgspec
# cost four times the whole read).
EnvelopeVersion = Annotated[int, msgspec.Meta(ge=1, le=SCHEMA_VERSION)]
EnvelopeTs = Union[Annotated[int, msgspec.Meta(ge=int(_MIN_TS), le=int(_MAX_TS))],
              Annotated[float, msgspec.Meta(ge=_MIN_TS, le=_MAX_TS)]]
EnvelopeName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


def typed_reader(source: str, kind: str, payload: type, payload_data: Callable[[Any], dict[str, Any]],
                 kept: Callable[[dict[str, Any]], Any] | None = None) -> Callable[[bytes | str | None], Envelope]:
    """A decoder for one topic: a ``source``/``kind`` message whose ``data`` the struct
    ``payload`` reads becomes an envelope with ``payload_data(struct)`` as its data, and
    ``kept(data)`` as its typed payload (events.payloads.typed) where given; anything else is
    read by :func:`events.envelope.decode`."""
    message = msgspec.defstruct(
        f"_{source.capitalize()}{kind.capitalize()}Message",
        [("v", EnvelopeVersion), ("id", EnvelopeName), ("ts", EnvelopeTs), ("job", EnvelopeName), ("node", EnvelopeName), ("source", str),
         ("kind", str), ("data", payload)],
        gc=False, forbid_unknown_fields=True)
    read = msgspec.json.Decoder(message).decode

    def decode_message(raw: bytes | str | None) -> Envelope:
        if type(raw) is bytes and raw.isascii():
            try:
                m: Any = read(raw)  # the struct defined above (defstruct's fields are not seen by a checker)
            except msgspec.DecodeError:  # a ValidationError is one too
                pass
            else:
                if m.source == source and m.kind == kind:
                    data = payload_data(m.data)
                    if m.id[0].isspace() or m.job[0].isspace() or m.node[0].isspace():
                        # not plain: Envelope checks it closely, and names the field it refuses
                        event = Envelope(v=m.v, id=m.id, ts=m.ts, job=m.job, node=m.node, source=m.source,
                                         kind=m.kind, data=data)
                    else:  # every field checked as it was parsed (above), as Envelope would check it
                        event = checked_envelope(m.v, m.id, m.ts, m.job, m.node, source, kind, data)
                    if kept is not None:
                        keep_payload(event, kept(data))
                    return event
        return decode(raw)

    return decode_message


class EnvelopeTime(msgspec.Struct, gc=False):
    """What placing a message in event time reads of its envelope, and nothing more: see
    :func:`read_envelope_time`."""

    ts: Annotated[float, msgspec.Meta(ge=_MIN_TS, le=_MAX_TS)]
    job: str
    node: str


_read_time = msgspec.json.Decoder(EnvelopeTime).decode


def read_envelope_time(raw: bytes | str | None) -> EnvelopeTime | None:
    """A message's ``ts``, ``job`` and ``node``, its payload skipped unread (a fifth of the cost of
    reading an NVML sample, and nothing of it kept); None where they are not a plausible time and
    two strings (the message is then read whole at once, and refused as it would be)."""
    if type(raw) is not bytes:
        return None
    try:
        return _read_time(raw)
    except msgspec.DecodeError:
        return None
