"""The node agent's answer to a command it refuses: one `check`/`command_ack` event.

A `run_checks` or `capture_stacks` refused by the agent's gate (events.command_screen: a bad
signature, expired, duplicate, over the lifetime cap ...) was only logged on the node, so the
remediation consumer waited out its deadline for an answer that would never come, and the history
counted the command as carried out. The ack carries the trainer hook's `command_ack` payload
(docs/events.md) on the `check` source: `telemetry.checks` is what remediation reads for the
answers to its stop-time checks, and the history stores it like every telemetry topic.

Only commands of the action the refusing source carries out are acked: every agent reads every
command of the fleet, and the trainer hook already acks the rest (an unreadable message, an
eviction of another job that names this node).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Collection

from faultlens.events.command_screen import Screened, ack_payload
from faultlens.events.envelope import Envelope

SOURCE = "check"
KIND = "command_ack"


def refusal_ack(result: Screened, *, job: str, node: str, actions: Collection[str],
                ts: float | None = None) -> Envelope | None:
    """The ack of a refused command of one of ``actions``; None for anything else."""
    cmd = result.command
    if result.obey or cmd is None or cmd.action not in actions:
        return None
    return Envelope(ts=time.time() if ts is None else ts, job=job, node=node, source=SOURCE, kind=KIND,
                    data=ack_payload(None, cmd, False, result.reason, result.addressed))


def refusal_acker(publish: Callable[[Envelope], Any], *, job: str, node: str,
                  actions: Collection[str]) -> Callable[[Screened], None]:
    """A CommandListener ``on_refused`` callback that publishes :func:`refusal_ack`."""
    def on_refused(result: Screened) -> None:
        event = refusal_ack(result, job=job, node=node, actions=actions)
        if event is not None:
            publish(event)
    return on_refused
