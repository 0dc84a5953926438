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

from faultlens.events.envelope import Envelope, checked_envelope, keep_payload
from faultlens.events.payload_fields import NonFiniteText
from faultlens.events.payloads_job import TrainStep
from faultlens.events.typed_read import Int64, NonNegInt64, message_struct, typed_reader

_MAX = sys.float_info.max
_UNSET = msgspec.UNSET
_U = msgspec.UnsetType
# TrainStep's own types (events/payload_fields.py), with integers bounded to 64 bits.
_NON_NEG_INT: Any = NonNegInt64
_NON_NEG: Any = Union[NonNegInt64, Annotated[float, msgspec.Meta(ge=0, le=_MAX)]]
_METRIC: Any = Union[Int64, float, NonFiniteText]
_TYPES: dict[str, Any] = {
    "rank": _NON_NEG_INT, "step": _NON_NEG_INT, "loss": _METRIC, "grad_norm": _METRIC, "step_time_s": _NON_NEG,
    "compute_s": _NON_NEG, "tokens": _NON_NEG, "tokens_per_s": _NON_NEG, "mfu": _NON_NEG, "classes": _NON_NEG_INT,
    "from_scratch": bool, "lr": _NON_NEG, "work": _NON_NEG, "chance_loss": _NON_NEG, "loss_steps": _NON_NEG_INT,
}
assert set(_TYPES) == set(TrainStep.__struct_fields__), "a TrainStep key the typed read does not know"

# TrainStep's keys, each absent (unset), null or of its type: a step that sends a null.
_Step: Any = msgspec.defstruct("_Step", [(name, Union[t, None, _U], _UNSET) for name, t in _TYPES.items()],
                               gc=False, forbid_unknown_fields=True)

# The TrainStep a plain step is read into, with no copy: TrainStep itself, its keys' values bounded
# as above and never null (a null goes the way that keeps it, in data, as null), and its unsent keys
# left out of to_builtins (omit_defaults: an unsent key is None, the default, and a sent one never
# is), so the data made of it holds the keys the message has, as the general reading's does.
StepRead: Any = msgspec.defstruct("StepRead", [(name, t, None) for name, t in _TYPES.items()], bases=(TrainStep,),
                                  frozen=True, kw_only=True, gc=False, forbid_unknown_fields=True,
                                  omit_defaults=True)
_read_plain = msgspec.json.Decoder(message_struct("_PlainStepMessage", StepRead)).decode
_to_builtins = msgspec.to_builtins


def _step_data(step: Any) -> dict[str, Any]:
    """The keys the message has, with their values (msgspec leaves the unset ones out, in C)."""
    return msgspec.to_builtins(step)


def _step_payload(data: dict[str, Any]) -> TrainStep:
    return TrainStep(**data)  # every value was checked against TrainStep's type as it was read


# A step with a null, or not plain in another way: its TrainStep made from the data read.
_decode_with_nulls = typed_reader("train", "step", _Step, _step_data, _step_payload)


def decode_train_message(raw: bytes | str | None) -> Envelope:
    """The envelope of one message of the train topic: a plain step with its TrainStep kept,
    anything else as events.envelope.decode reads it.

    A plain step (no null, every key documented, every name plain) is read in one msgspec call,
    its envelope and its payload together, the payload straight into the :class:`TrainStep` every
    reader reads (:data:`StepRead`): no dict to build the payload from, no second Struct (issue 56).
    A step with a null (the trainer hook sends ``"mfu": null`` where it knows no peak) is read as
    before (:data:`_decode_with_nulls`), so ``data`` keeps the null; whatever the plain read refuses goes
    that way too, so every verdict and dead-letter reason is the one it was."""
    if type(raw) is bytes and raw.isascii() and b"null" not in raw:
        try:
            m = _read_plain(raw)
        except msgspec.DecodeError:  # a ValidationError is one too
            pass
        else:
            if (m.source == "train" and m.kind == "step" and not m.id[0].isspace() and not m.job[0].isspace()
                    and not m.node[0].isspace()):
                step = m.data
                event = checked_envelope(m.v, m.id, m.ts, m.job, m.node, "train", "step", _to_builtins(step))
                keep_payload(event, step)
                return event
    return _decode_with_nulls(raw)
