"""How a consumer-group runner reads, orders and commits: every tunable of
:class:`streams.runner.loop.GroupRunner` in one frozen value, with its default and why it is there.

One value, not twenty keyword arguments spread over the runner's attributes, so a caller (or a
test) sees every choice a runner was given in one place, and no part of the runner can change it
while it runs. ``GroupRunner(..., event_time=True)`` still works: its keyword arguments are the
fields here (:meth:`RunnerOptions.of`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable

from faultlens.events.event_clock import DEFAULT_MAX_SKEW_S
from faultlens.events.event_time import WriterWord
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.types import DEFAULT_MAX_MESSAGE_BYTES, Record

# How often a member that keeps reading waits for its outputs to be acknowledged and commits.
# Waiting after every batch kept a member idle for the broker's round trip each time (measured on
# the node stage: an eighth to a sixth of its wall time); in between, outputs are only sent. A
# crash re-reads at most this much more input (at-least-once either way: nothing is committed
# before the outputs of everything before it are acknowledged). Kafka Streams commits
# at-least-once work every 30 s by default; a caught-up member commits at once.
COMMIT_INTERVAL_S = 0.5

# (progress, (reads, of) or None, behind, idle, done) → the announcements to send (the node stage's
# word downstream: streams/runner/progress.py); done: the last word of a run that stopped because its
# input ended (an idle stop, a drain stop)
ProgressCallback = Callable[[float, "tuple[tuple[str, ...], int] | None", bool, bool, bool], Iterable[Outgoing]]


@dataclass(frozen=True, slots=True)
class RunnerOptions:
    """Every choice of a runner besides where it reads (settings, group, topics), what it runs
    (the handler, the decoders) and the producer it shares."""

    poll_timeout_ms: int = 200
    max_records: int = 2000  # per poll
    tick_interval_s: float = 1.0  # how often a handler's clock (tick) is called
    # Hand records on in event-time order across every partition and topic (the diagnosis
    # consumer; streams/runner/event_time.py), not in arrival order.
    event_time: bool = False
    max_idle_s: float = 2.0  # how long a caught-up, silent partition holds event time back
    max_skew_s: float = DEFAULT_MAX_SKEW_S  # a sender's clock error beyond which its time is replaced
    # Judge a sender's clock against its peers' (off for the job stage: the node stage placed
    # each event already, and a `summaries` record's broker time is only when a member wrote it).
    judge_clocks: bool = True
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # larger: a dead letter, never decoded
    # Topics every member reads in full, outside the group (the compacted `jobs`): not committed,
    # read from the start by each member (event_time only).
    broadcast_topics: tuple[str, ...] = ()
    # What a record says of its writer's progress (the job stage reads the node stage's words).
    watermark_of: Callable[[Record], WriterWord | None] | None = None
    # Announce this member's progress downstream (the node stage); event_time only.
    on_progress: ProgressCallback | None = None
    # Handler state (windows, hang rounds, dedup) lives in memory: a partition that comes to this
    # member is read again from this much broker time before its committed offset, so that state
    # is rebuilt from retained input. 0: read from the commit.
    rebuild_s: float = 0.0
    commit_interval_s: float = COMMIT_INTERVAL_S
    # Topics whose messages are read only as far as placing them in time needs, until the merge
    # lets them go (streams/intake.py).
    deferred_topics: tuple[str, ...] = ()

    @classmethod
    def of(cls, options: RunnerOptions | None = None, **overrides: Any) -> RunnerOptions:
        """``options`` (or the defaults) with ``overrides``, the runner's keyword arguments; a
        name that is no option is a TypeError that says which."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown runner option(s): {', '.join(unknown)} (see streams.runner.options)")
        values = {f.name: getattr(options, f.name) for f in fields(cls)} if options is not None else {}
        values.update(overrides)
        # Iterables given by callers (lists, a dict's keys) become tuples: the value stays frozen.
        for name in ("broadcast_topics", "deferred_topics"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)

