"""A training step (`train`/`step`), read straight from its bytes: 80 % of a training job's messages
(one per rank and step, against one NVML sample per node).

Read the general way, a step is JSON into dicts (orjson), an :class:`~events.envelope.Envelope`
from them, and its ``data`` converted to :class:`~events.payloads_job.TrainStep` by the payload
check: 4.4 µs of a ~290-byte message on a loaded machine, where msgspec reads the same message
into typed structs in 0.4 µs. Here msgspec reads it in one C pass, every payload key checked as
:class:`TrainStep` checks it (the types of events/payload_fields.py, integers within 64 bits as
events/typed_read.py bounds them), and the TrainStep is made from the values read and kept on
the event, so the payload check finds it read (events.payloads.check_payload).

Only what is certainly plain is read this way: the envelope and payload keys all documented ones
(an unknown key, kept by the general reading in ``data``, sends the message that way), every value
of its type. Anything else (another kind on the topic, a value of the wrong type, a byte that is
not ASCII) goes through :func:`events.envelope.decode`, so it gets the same verdict and the same
dead-letter reason as it would there. ``data`` holds the keys the message has, with their values;
a key sent as null stays null, as the general reading keeps it.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Union

import msgspec

from faultlens.events.payload_fields import NonFiniteText
from faultlens.events.payloads_job import TrainStep
from faultlens.events.typed_read import Int64, NonNegInt64, typed_reader

_MAX = sys.float_info.max
_UNSET = msgspec.UNSET
_U = msgspec.UnsetType
# TrainStep's own types (events/payload_fields.py), with integers bounded to 64 bits.
_NonNegInt = Union[NonNegInt64, None, _U]
_NonNeg = Union[NonNegInt64, Annotated[float, msgspec.Meta(ge=0, le=_MAX)], None, _U]
_Metric = Union[Int64, float, NonFiniteText, None, _U]


class _Step(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """TrainStep's keys, each absent (unset), null or of its type."""

    rank: _NonNegInt = _UNSET
    step: _NonNegInt = _UNSET
    loss: _Metric = _UNSET
    grad_norm: _Metric = _UNSET
    step_time_s: _NonNeg = _UNSET
    compute_s: _NonNeg = _UNSET
    tokens: _NonNeg = _UNSET
    tokens_per_s: _NonNeg = _UNSET
    mfu: _NonNeg = _UNSET
    classes: _NonNegInt = _UNSET
    from_scratch: Union[bool, None, _U] = _UNSET
    lr: _NonNeg = _UNSET
    work: _NonNeg = _UNSET
    chance_loss: _NonNeg = _UNSET
    loss_steps: _NonNegInt = _UNSET


_FIELDS = _Step.__struct_fields__
assert set(_FIELDS) == set(TrainStep.__struct_fields__), "a TrainStep key the typed read does not know"


def _step_data(step: _Step) -> dict[str, Any]:
    """The keys the message has, with their values (msgspec leaves the unset ones out, in C)."""
    return msgspec.to_builtins(step)


def _step_payload(data: dict[str, Any]) -> TrainStep:
    return TrainStep(**data)  # every value was checked against TrainStep's type as it was read


# The envelope of one message of the train topic: a plain step with its TrainStep kept, anything
# else as events.envelope.decode reads it.
decode_train_message = typed_reader("train", "step", _Step, _step_data, _step_payload)
