"""A producer stand-in that keeps what a trainer hook sends: unit tests and benches read the events a
TrainerHook made without a broker (tests/helpers/sent_events.py names it for the tests)."""

from __future__ import annotations

from faultlens.events.envelope import Envelope


class SentEvents:
    def __init__(self) -> None:
        self.events: list[Envelope] = []

    def send_event(self, event: Envelope) -> None:
        self.events.append(event)

    def flush(self, timeout: float | None = None) -> None:
        return None
