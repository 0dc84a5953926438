"""A training step (`train`/`step`), read straight from its bytes into ONE slim typed record,
:class:`StepEvent`: 80 % of a training job's messages (one per rank and step, against one NVML
sample per node).

Read the general way, a step is JSON into dicts (orjson), an :class:`~events.envelope.Envelope`
from them, and its ``data`` converted to :class:`~events.payloads_job.TrainStep` by the payload
check. Here msgspec reads it in one C pass straight into a :class:`StepEvent`: the envelope's
fields checked as Envelope checks them (events/typed_read.py), the payload straight into the
TrainStep its readers read (TrainStep's own types, its ints bounded to those orjson reads as
ints, so that both readings give the same values). Nothing is built in Python: no Envelope (nine
slot sets), no ``data`` dict, no TrainStep made from one (issue 56: ~16k of a step's ~33k
instructions). ``data`` is read from the message's bytes, kept on the record, only when a reader
asks for it, so a key sent as null stays null and an unknown key stays, as the general reading
keeps them.

Only what is certainly plain is read this way: the envelope's keys all documented ones, its names
plain (none starting with a blank), no byte that is not ASCII, every payload value of its type.
Anything else goes through :func:`events.envelope.decode`, so it gets the same verdict and the
same dead-letter reason as it would there (and is an Envelope, as every other kind is).

Who reads a step after intake, and what of it (the map this record was cut to; `diagnose` of every
stage, issue 56):

- intake (streams/intake.py ``_place``) and the event clock: ``ts``, ``job``, ``node``; the
  event-time merge and the runner read the Record, not the event; a dead letter is made of the
  Record's bytes and the exception's text, never of the event.
- the engine's admission (diagnosis/engine/core.py ``process``, step_batch.py ``process_steps``):
  ``id`` (dedup of redelivered ids), ``source``, ``kind``, ``job``, ``ts``, the kept payload
  (``_payload``, its ``rank``); a skewed step is re-timed by :meth:`StepEvent.retimed` (as an
  Envelope is), never ``dataclasses.replace``.
- the node stage (diagnosis/edge/node_consumer.py, engine/stages.py ``NodeStage.observe_step``):
  the TrainStep handed to each step reader (the training rules, thermal, the feature windows),
  which read ``job``, ``node``, ``ts``, ``id`` of the event; it forwards a step as the bytes it came
  in (a re-timed one through :func:`events.envelope.encode`, which reads ``to_dict``).
- the job stage (engine/stages.py ``JobStage.observe_steps``): the hang detector, the ranks' work
  (diagnosis/peers/slow_work.py), liveness and the stalled loss, each through
  ``typed(event, TrainStep)`` (events/payloads.py: the kept payload) and ``job``, ``node``, ``ts``,
  ``id``; no finding carries an event, only its id.
- ``data`` itself: only a rank check off the step path (engine/stages.py ``rank_mismatch``, for a
  step the usual path does not take) and tests; history and evidence read their own decoding of
  the bytes (history/consumer.py), not this record.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from faultlens.events.envelope import SCHEMA_VERSION, Envelope, decode
from faultlens.events.payloads_job import TrainStep
from faultlens.events.typed_read import EnvelopeName, EnvelopeTs, EnvelopeVersion


class StepEvent(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """One ``train``/``step`` message, read whole by msgspec (see the module's docstring): what an
    :class:`~events.envelope.Envelope` of it offers its readers (the fields, ``data``, ``key``,
    ``to_dict``, ``retimed``), its TrainStep kept as an Envelope keeps a typed payload
    (``events.payloads.typed(event, TrainStep)`` gives it)."""

    v: EnvelopeVersion
    id: EnvelopeName
    ts: EnvelopeTs
    job: EnvelopeName
    node: EnvelopeName
    source: str
    kind: str
    _payload: TrainStep = msgspec.field(name="data")
    # The message as it came: ``data`` is read from it when asked (set once, after the read).
    _raw: bytes = b""

    @property
    def data(self) -> dict[str, Any]:
        """The payload as the general reading has it: read from the bytes on each call (no step
        reader on the usual path asks for it)."""
        data: dict[str, Any] = orjson.loads(self._raw)["data"]
        return data

    @property
    def key(self) -> bytes:
        """Kafka key, as Envelope.key gives it for a step: the node's."""
        return self.node.encode()

    def to_dict(self) -> dict[str, Any]:
        return {"v": self.v, "id": self.id, "ts": self.ts, "job": self.job, "node": self.node,
                "source": self.source, "kind": self.kind, "data": self.data}

    def retimed(self, ts: float) -> StepEvent:
        """The same step placed at ``ts`` (a skewed clock's step moved into the job's time)."""
        return msgspec.structs.replace(self, ts=ts)


assert SCHEMA_VERSION == 1  # a second version would be read by its own record
_read = msgspec.json.Decoder(StepEvent).decode
_keep_raw = StepEvent.__dict__["_raw"].__set__  # frozen: set through its slot, once


def decode_train_message(raw: bytes | str | None) -> StepEvent | Envelope:
    """A message of the train topic: a plain step as a :class:`StepEvent`, anything else as
    :func:`events.envelope.decode` reads it (an Envelope, or InvalidEvent naming what is wrong)."""
    if type(raw) is bytes and raw.isascii():
        try:
            m = _read(raw)
        except msgspec.DecodeError:  # a ValidationError is one too
            pass
        else:
            if (m.source == "train" and m.kind == "step" and not m.id[0].isspace() and not m.job[0].isspace()
                    and not m.node[0].isspace()):
                _keep_raw(m, raw)
                return m
    return decode(raw)
