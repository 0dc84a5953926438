"""What a handler of :class:`streams.runner.loop.GroupRunner` may take, declared by the methods it has.

A handler is a plain function of a batch, or an object with ``handle(records)`` (:class:`Handler`);
each other thing it can be told is a Protocol of its own, and the runner asks ``isinstance`` once,
when it is built, instead of guessing from parameter names:

- :class:`WallClock`: ``tick(now)``, called every ``tick_interval_s`` when the input lets the wall
  clock stand in for event time (nothing held, nothing unread);
- :class:`HeldAwareClock`: ``tick_held(now, busy, upstream)``, a clock that can leave the jobs with
  records still held alone, so it ticks whenever the input is live, and that keeps the time of the
  jobs read from partitions whose every upstream writer fell silent where they stopped (issue 32);
  preferred over ``tick`` where a handler has both;
- :class:`InputEnd`: ``input_ended(now, upstream)``, once, when a bounded run stops because its
  input ended (its idle stop, or a drained stop): what only more wall time would have judged is
  judged then (the job stage: each quiet job's end), not left to how long the member stayed up;
- :class:`AssignmentListener`: ``on_assigned(partitions)``, bookkeeping only (it runs inside the
  client's rebalance callback);
- :class:`PartitionStateOwner`: ``partitions_moved(partitions)``, for a handler whose state is
  kept per input partition: which partitions left this member or came to it from another (state
  rebuilt from retained input), not those a rebalance gave straight back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Mapping, Protocol, runtime_checkable

from kafka.structs import TopicPartition

from faultlens.events.event_time import UpstreamStop
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.types import Handler, Record

HandleFn = Callable[[list[Record]], Iterable[Outgoing]]


@runtime_checkable
class WallClock(Protocol):
    def tick(self, now: float) -> Iterable[Outgoing]: ...


@runtime_checkable
class HeldAwareClock(Protocol):
    def tick_held(self, now: float, busy: frozenset[str],
                  upstream: Mapping[TopicPartition, UpstreamStop]) -> Iterable[Outgoing]: ...


@runtime_checkable
class InputEnd(Protocol):
    def input_ended(self, now: float, upstream: Mapping[TopicPartition, UpstreamStop]) -> Iterable[Outgoing]: ...


@runtime_checkable
class AssignmentListener(Protocol):
    def on_assigned(self, partitions: Collection[TopicPartition]) -> Any: ...


@runtime_checkable
class PartitionStateOwner(Protocol):
    def partitions_moved(self, partitions: Collection[TopicPartition]) -> Any: ...


@dataclass(frozen=True, slots=True)
class HandlerParts:
    """What the runner calls of one handler, resolved once (see the module doc)."""

    handle: HandleFn
    tick: Callable[[float], Iterable[Outgoing]] | None = None
    tick_held: Callable[[float, frozenset[str], Mapping[TopicPartition, UpstreamStop]],
                        Iterable[Outgoing]] | None = None
    on_assigned: Callable[[Collection[TopicPartition]], Any] | None = None
    on_moved: Callable[[Collection[TopicPartition]], Any] | None = None
    input_ended: Callable[[float, Mapping[TopicPartition, UpstreamStop]], Iterable[Outgoing]] | None = None

    @property
    def ticks(self) -> bool:
        return self.tick is not None or self.tick_held is not None

    @classmethod
    def of(cls, handler: Handler | HandleFn) -> HandlerParts:
        return cls(
            handle=handler.handle if isinstance(handler, Handler) else handler,
            tick=handler.tick if isinstance(handler, WallClock) else None,
            tick_held=handler.tick_held if isinstance(handler, HeldAwareClock) else None,
            on_assigned=handler.on_assigned if isinstance(handler, AssignmentListener) else None,
            on_moved=handler.partitions_moved if isinstance(handler, PartitionStateOwner) else None,
            input_ended=handler.input_ended if isinstance(handler, InputEnd) else None,
        )
