"""Whether a consumer's broker answers, said once in faultlens's own words when it stops.

A broker that goes away (a restart, a network cut) is retried by the Kafka client for ever:
FindCoordinator, metadata, fetches, each on the client's reconnect backoff. That is what a
diagnosis process must do: it outlives a broker restart and resumes from its last commit, and
an exit would only hand the same wait to systemd or Kubernetes. But the client says so only in
its own connection errors, dozens a minute from ``kafka.net`` and ``kafka.coordinator`` that name
a node id, never the bootstrap address nor for how long (`faultlens diagnose`, broker stopped
90 s: 168 such lines, none of faultlens's own, and a process that looks as idle as one on a
quiet cluster).

So the runner's loop tells a :class:`BrokerWatch` whether each poll brought records. When none
came for ``PROBE_EVERY_S`` it asks whether the first bootstrap address accepts a connection (one
TCP connect, at most a second), and once nothing answered for ``down_after_s``
(``FAULTLENS_BROKER_DOWN_S``, default 60 s) it logs one ERROR naming the broker and how long, then
again at doubling intervals up to 15 min, and a WARNING when the broker answers again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from faultlens.events.env_number import env_number
from faultlens.streams.broker import answers

log = logging.getLogger(__name__)

ENV = "FAULTLENS_BROKER_DOWN_S"
DOWN_AFTER_S = 60.0  # a broker restart takes tens of seconds; a minute of no answer is an outage
PROBE_EVERY_S = 5.0  # how often a loop that read nothing asks whether the broker answers
MAX_REPEAT_S = 900.0  # the ERROR comes again at doubling intervals, at most this far apart


def down_after_s(env: Mapping[str, str] = os.environ) -> float:
    """``FAULTLENS_BROKER_DOWN_S`` in seconds (over 0), else the default. A bad value is warned of, not raised:
    the watch is made inside a running stage's loop, which a tuning knob must not stop."""
    return env_number(ENV, DOWN_AFTER_S, on_bad="warn", above=0.0, environ=env)


class BrokerWatch:
    """When the broker last answered, and when to say it does not (see the module doc). Times
    are the loop's monotonic clock."""

    def __init__(
        self, bootstrap: str | None, down_after: float | None = None, probe: Callable[[str, float], bool] = answers
    ) -> None:
        self.bootstrap = bootstrap
        self.down_after_s = down_after_s() if down_after is None else down_after
        self.probe = probe
        self._heard: float | None = None  # the broker's latest answer (records, or a connection)
        self._probed = float("-inf")
        self._next_error: float | None = None  # set once unreachability was said
        self._repeat = self.down_after_s

    @property
    def unreachable(self) -> bool:
        """Whether the ERROR was said and the broker has not answered since."""
        return self._next_error is not None

    def polled(self, got_records: bool, now: float) -> None:
        """A poll of the loop ended at ``now``, with records or without."""
        if self._heard is None:
            self._heard = now
        if got_records:
            self._answered(now)
            return
        if now - self._probed < PROBE_EVERY_S or not self.bootstrap:
            return
        self._probed = now
        if self.probe(self.bootstrap, 1.0):
            self._answered(now)
            return
        silent = now - self._heard
        if silent < self.down_after_s or (self._next_error is not None and now < self._next_error):
            return
        log.error(
            "Kafka broker %s unreachable for %.0fs: nothing is read, diagnosed or acted on until it answers; "
            "retrying (the client reconnects by itself, and this process resumes from its last commit)",
            self.bootstrap,
            silent,
        )
        self._next_error = now + self._repeat
        self._repeat = min(2 * self._repeat, MAX_REPEAT_S)

    def _answered(self, now: float) -> None:
        if self._next_error is not None and self._heard is not None:
            log.warning("Kafka broker %s answers again after %.0fs unreachable", self.bootstrap, now - self._heard)
        self._heard = now
        self._next_error = None
        self._repeat = self.down_after_s
