"""One pass of an agent's source, in the test's thread: what it published."""

from __future__ import annotations

import threading

from faultlens.collectors.agent import Agent


def run_source_once(agent: Agent, name: str) -> list:
    """One pass of the agent's source ``name`` (a poll, then its stop): the events it published.
    The agent is gone after it: the next one takes its spool directory."""
    source = agent.source(name)
    out: list = []
    source.publish = out.append  # type: ignore[attr-defined]
    stop = threading.Event()
    stop.set()
    source.run(stop)
    agent.spool.close()
    return out
