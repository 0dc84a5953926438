"""Several envelopes in one message: the job-level events the node stage passes on.

The node stage passes every job-level event it reads (train steps, heartbeats, NCCL lines) on to
the job stage through `summaries`. As one Kafka message each, sending them cost the node stage
more than all its detectors (a kafka-python send is ~30 µs) and the job stage as much again to
fetch. So what one handled batch passes on for a job travels as one `summary`/`bundle` message:
``data = {"events": [envelope, ...]}``, the envelopes as they were read, in the order handled.
The job stage's runner unpacks it (:func:`decode_bundled`): each inner event becomes a record of
its own at the bundle's offset, placed in event time by its own ``ts``.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from faultlens.events.envelope import Envelope, InvalidEvent, loads, new_id

BUNDLE_KIND = "bundle"
# Well under Kafka's default message.max.bytes (1 MiB): a bundle is cut before it grows past this.
MAX_BUNDLE_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Bundle:
    """A decoded bundle: its good events, and each inner event that is not one, with the reason."""

    events: tuple[Envelope, ...]
    rejected: tuple[tuple[bytes, str], ...] = ()


def pack(job: str, sender: str, ts: float, encoded: list[bytes], max_bytes: int = MAX_BUNDLE_BYTES) -> list[bytes]:
    """Bundle messages holding ``encoded`` (each an envelope's JSON), in order, each under
    ``max_bytes`` (an event larger than that alone goes in a bundle of its own). ``ts`` is the
    bundle's own time (the latest of its events); ``sender`` names the node-stage member."""
    if not encoded:
        return []
    # Nearly always one bundle: the sizes summed in C, no Python loop an event (the node stage packs
    # every step it passes on: issue 56). The loop below would cut none where its last event fits
    # (a chunk's size only grows), i.e. where all but the last, each with its comma, and the last fit.
    if sum(map(len, encoded)) + len(encoded) - 1 <= max_bytes:
        return [_bundle(job, sender, ts, encoded)]
    out: list[bytes] = []
    chunk: list[bytes] = []
    size = 0
    for raw in encoded:
        if chunk and size + len(raw) > max_bytes:
            out.append(_bundle(job, sender, ts, chunk))
            chunk, size = [], 0
        chunk.append(raw)
        size += len(raw) + 1
    out.append(_bundle(job, sender, ts, chunk))
    return out


def _bundle(job: str, sender: str, ts: float, chunk: list[bytes]) -> bytes:
    head = orjson.dumps({"v": 1, "id": f"b.{new_id()}", "ts": ts, "job": job, "node": sender,
                         "source": "summary", "kind": BUNDLE_KIND})
    # The inner envelopes were parsed (or written) by us already: spliced in, not re-encoded, by
    # joins (a bundle is up to 256 kB, and each `+` copied all of it into a fresh allocation: a
    # third more per 13 kB NIC sample passed on); the commas put in by join, in C (issue 56).
    return b"".join((head[:-1], b',"data":{"events":[', b",".join(chunk), b"]}}"))


def decode_bundled(raw: bytes | str | None) -> Envelope | Bundle:
    """:func:`events.envelope.decode`, except that a bundle comes back as a :class:`Bundle`."""
    obj = loads(raw)
    envelope = Envelope.from_dict(obj)
    if envelope.source != "summary" or envelope.kind != BUNDLE_KIND:
        return envelope
    inner = envelope.data.get("events")
    if not isinstance(inner, list):
        raise InvalidEvent("data.events", f"a bundle holds a list of events, got {type(inner).__name__}")
    events: list[Envelope] = []
    rejected: list[tuple[bytes, str]] = []
    for item in inner:
        try:
            event = Envelope.from_dict(item)
        except InvalidEvent as exc:
            rejected.append((orjson.dumps(item, default=str), f"invalid event in a bundle: {exc}"))
            continue
        if event.source == "summary" and event.kind == BUNDLE_KIND:
            rejected.append((orjson.dumps(item, default=str), "a bundle inside a bundle"))
            continue
        events.append(event)
    return Bundle(tuple(events), tuple(rejected))
