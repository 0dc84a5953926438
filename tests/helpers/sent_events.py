"""The producer stand-in the tests read a trainer hook's events from: the test bed's, shared with the benches
(bench/testbed/sent_events.py; bench/ never imports tests/)."""

from __future__ import annotations

from bench.testbed.sent_events import SentEvents

__all__ = ["SentEvents"]
