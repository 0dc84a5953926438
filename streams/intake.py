"""Polled messages → records, the runner's first step: a message over the size limit or one that
does not decode becomes a dead letter with the reason; a bundle (events/bundle.py) becomes one
record per event; an upstream writer's watermark record (the job stage) only moves its
partition's mark; and, in event-time mode, each record is placed in time by the
:class:`EventClock` (the whole batch teaches the clock before any of it is placed).

In event-time mode a record waits in the merge until no partition can deliver an earlier one:
tens of thousands of them while a backlog is read. A message of a ``deferred`` topic (the big NVML
and NIC samples) is read then only as far as placing it needs (:func:`read_envelope_time`) and read
whole when the merge lets it go (:meth:`Intake.complete`): decoded whole at once, a held NVML sample
was ~5 kB of Python objects besides its bytes (a 371k-message backlog: the node stage's peak RSS
1.9 → 1.3 GB, its speed unchanged; bench/results_throughput.md). What the whole reading refuses
is then a dead letter, with the reason it would have had at once.

Placing reads an envelope written as our writers and every JSON library in their order write it
(``{"v":…,"id":…,"ts":…,"job":…,"node":…,"source":…`` first) from its keys before ``source``
alone (:func:`peek_envelope_time`): msgspec's reading of the time skipped the whole payload to the
end, ~49k instructions an NVML sample, 6 % of the node stage's work past decoding (issue 56). A
message not so written is read as before. What the prefix leaves unread is read by
:meth:`Intake.complete`: a payload that is not JSON is refused there, with the same reason as at
once. One message differs: one that states ``ts``, ``job`` or ``node`` twice is placed by the
first statement here and read with the last (JSON says names should be unique; no writer repeats
one), where read whole at once, or by the general peek, it is placed by the last.
"""

from __future__ import annotations

import time
from typing import Callable, Collection, Mapping, Sequence

import msgspec

from faultlens.events.bundle import Bundle
from faultlens.events.envelope import InvalidEvent, decode
from faultlens.events.event_clock import EventClock
from faultlens.events.event_time import WatermarkMerge, WriterWord
from faultlens.events.typed_read import EnvelopeTime, read_envelope_time
from faultlens.streams.messages import PolledMessage, PolledPartition
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.types import Decoder, Record, RunnerStats, broker_time, dead_letter

# What a decoder raises for a message it cannot read: the message becomes a dead letter.
UNREADABLE = (InvalidEvent, ValueError, TypeError, KeyError)

# Where the envelope's keys before its payload end, as our writers (and every JSON library, in
# the order it is given) write them: a `,"` is never inside a JSON string (a quote there is escaped),
# so the first one found is a key of the envelope, or of something nested, whose prefix then
# does not read as an object.
_SOURCE_KEY = b',"source":'
_PREFIX_MAX = 1024  # looked for no further: an envelope with longer names is peeked the general way
_read_prefix = msgspec.json.Decoder(EnvelopeTime).decode


def peek_envelope_time(raw: bytes | str | None) -> EnvelopeTime | None:
    """:func:`read_envelope_time` of the envelope's keys before ``source`` where ts, job and node
    are among them (see the module's docstring), the payload not scanned; of the whole message
    otherwise. The same answer for every JSON message that states each envelope key once (of one
    that is not JSON past those keys, the time: its whole reading refuses it)."""
    if type(raw) is bytes:
        end = raw.find(_SOURCE_KEY, 0, _PREFIX_MAX)
        if end > 0:
            try:
                return _read_prefix(raw[:end] + b"}")
            except msgspec.DecodeError:  # not all three there, or not as the general peek takes them
                pass
    return read_envelope_time(raw)


class Intake:
    """Decodes and places what one member polls (see the module's docstring)."""

    def __init__(self, decoders: Mapping[str, Decoder] | Decoder, max_message_bytes: int, group: str | None,
                 stats: RunnerStats, clock: EventClock | None = None, merge: WatermarkMerge[Record | None] | None = None,
                 watermark_of: Callable[[Record], WriterWord | None] | None = None,
                 deferred: Collection[str] = ()) -> None:
        self._decoders = decoders
        self.max_message_bytes = max_message_bytes
        self.group = group
        self.stats = stats
        self.clock = clock
        self.merge = merge
        self.watermark_of = watermark_of
        # Only where records wait for event time, and never on a topic that carries watermarks
        # (those are read at once: they move the merge, they are not held in it).
        self.deferred = frozenset(deferred) if clock is not None and watermark_of is None else frozenset()

    def _decoder(self, topic: str) -> Decoder:
        if callable(self._decoders):
            return self._decoders
        return self._decoders.get(topic, decode)

    def split(self, polled: Mapping[PolledPartition, Sequence[PolledMessage]]) -> tuple[list[Record], list[Outgoing]]:
        good: list[Record] = []  # placed in time below (event-time mode)
        dead: list[Outgoing] = []
        max_bytes = self.max_message_bytes
        merge = self.merge
        marks = self.watermark_of if merge is not None else None
        deferred = self.deferred
        for tp, messages in polled.items():
            dec = self._decoder(tp.topic)
            topic, partition = tp.topic, tp.partition
            peek = peek_envelope_time if topic in deferred else None
            for m in messages:
                raw = m.value
                size = 0 if raw is None else len(raw)
                if size > max_bytes:
                    # Never handed to a parser whole: a runaway line or a hostile sender.
                    self.stats.oversized += 1
                    dead.append(dead_letter(topic, partition, m.offset, m.key, raw,
                                            f"oversized: {size} bytes (limit {max_bytes})", self.group))
                    continue
                if peek is not None:
                    # A variable of its own: mypy types one by its first assignment, and compiled
                    # (mypyc) that type is enforced, so sharing `value` with the decoder's Envelope
                    # made every deferred message a dead letter (bench/results_throughput.md).
                    peeked = peek(raw)
                    if peeked is not None:  # read whole by complete(), once released
                        good.append(Record(topic, partition, m.offset, m.key, peeked, m.timestamp, None, None, None, raw))
                        continue
                try:
                    value = dec(raw)
                except UNREADABLE as exc:
                    dead.append(self._unreadable(topic, partition, m.offset, m.key, raw, exc))
                    continue
                if type(value) is Bundle:
                    # Each event of a bundle is a record of its own, at the bundle's offset.
                    good.extend(Record(topic, partition, m.offset, m.key, e, m.timestamp) for e in value.events)
                    dead.extend(dead_letter(topic, partition, m.offset, m.key, item, reason, self.group)
                                for item, reason in value.rejected)
                    continue
                record = Record(topic, partition, m.offset, m.key, value, m.timestamp, None, None, None, raw)
                if marks is not None:
                    mark = marks(record)
                    if mark is not None:
                        assert merge is not None  # marks are read only with a merge (above)
                        said_at = broker_time(m.timestamp)
                        merge.report(tp, mark.member, mark.watermark, time.time(), said_at, reads=mark.reads,
                                     of=mark.of, behind=mark.behind, idle=mark.idle, done=mark.done)
                        merge.add(tp, m.offset, float("-inf"), None, time.time(), said_at)  # commits past it
                        continue
                good.append(record)
        if self.clock is not None:
            self._place(good)
        return good, dead

    def complete(self, records: list[Record], dead: list[Outgoing]) -> list[Record]:
        """``records`` (released by the merge) with each deferred one read whole; one that does not
        read becomes a dead letter in ``dead``, its reason the one split would have given."""
        if not self.deferred:
            return records
        refused = None
        for r in records:
            if type(r.value) is EnvelopeTime:
                try:
                    r.value = self._decoder(r.topic)(r.raw)
                except UNREADABLE as exc:
                    dead.append(self._unreadable(r.topic, r.partition, r.offset, r.key, r.raw, exc))
                    refused = refused or set()
                    refused.add(id(r))
        if refused is None:
            return records
        return [r for r in records if id(r) not in refused]

    def _unreadable(self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes | None,
                    exc: Exception) -> Outgoing:
        """The dead letter of a message its decoder refused: the same whether it was read at once
        (split) or once released (complete)."""
        return dead_letter(topic, partition, offset, key, raw, f"invalid: {exc}", self.group)

    def _place(self, records: list[Record]) -> None:
        """Each record's place in event time set: the whole batch teaches the clock first, in the
        clock's one pass over the records (EventClock.place_records). (Set on the records split built,
        not on new ones: a Record built twice a message cost ~0.15 µs.)"""
        assert self.clock is not None
        moved = self.clock.place_records(records, time.time())
        if moved:
            self.stats.skewed += moved
