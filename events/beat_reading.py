"""A node agent's heartbeat (`heartbeat`/`beat`), read straight from its bytes: a tenth of all
telemetry (one per node a second, beside one NVML sample and a step per rank).

Read the general way, a beat is JSON into dicts (orjson), an :class:`~events.envelope.Envelope`
checked field by field in Python, and its ``data`` converted to
:class:`~events.payloads_job.HeartbeatBeat` by the payload check. Here msgspec reads it in one C
pass, as events/step_reading.py reads a step: the envelope checked as Envelope checks it
(events/typed_read.py), every payload key of HeartbeatBeat's type, and the HeartbeatBeat made
from the values read and kept on the event.

Only what is certainly plain is read this way: the documented keys, counters and pids as 64-bit
integers, ``sources`` a map of names to status words, ``stopping`` a flag, and no ``health``
report (the agent's own, nested and free-form: a beat that carries one goes the general way).
Anything else goes through :func:`events.envelope.decode`, so it gets the same verdict and the
same dead-letter reason as it would there.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from faultlens.events.payloads_job import HeartbeatBeat
from faultlens.events.typed_read import Int64, typed_reader

_UNSET = msgspec.UNSET
_U = msgspec.UnsetType
_Pids = Union[list[Union[Int64, None]], None, _U]


class _Beat(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """HeartbeatBeat's keys, each absent (unset), null or of the plain type named above."""

    seq: Union[Int64, None, _U] = _UNSET
    pids: _Pids = _UNSET
    sources: Union[dict[str, str], None, _U] = _UNSET
    unranked_pids: _Pids = _UNSET
    health: Union[None, _U] = _UNSET
    stopping: Union[bool, None, _U] = _UNSET


assert set(_Beat.__struct_fields__) == set(HeartbeatBeat.__struct_fields__), "a HeartbeatBeat key the read does not know"


def _beat_data(beat: _Beat) -> dict[str, Any]:
    """The keys the message has, with their values (msgspec leaves the unset ones out, in C)."""
    return msgspec.to_builtins(beat)


def _beat_payload(data: dict[str, Any]) -> HeartbeatBeat:
    return HeartbeatBeat(**data)  # every value was checked against HeartbeatBeat's type as it was read


# The envelope of one message of the heartbeat topic: a plain beat with its HeartbeatBeat kept,
# anything else as events.envelope.decode reads it.
decode_beat_message = typed_reader("heartbeat", "beat", _Beat, _beat_data, _beat_payload)
