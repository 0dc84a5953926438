"""A broker outage: the agent spools while the broker is down and sends every fault event, in
order, once it is back. The test owns its broker (a fixed port, stopped and restarted)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from faultlens.collectors.agent import Agent, AgentConfig
from faultlens.events.envelope import decode
from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker, free_port
from faultlens.streams.config import KafkaSettings
from faultlens.streams.reader import iter_topics
from tests.progress import wait_until

pytestmark = [pytest.mark.broker, pytest.mark.e2e]

# NCCL WARN lines, numbered, so order and completeness can be counted on the topic.
LINE = "n0:123:456 [2] NCCL WARN NET/IB : Got completion with error 12 (event {n})"


def _nccl_numbers(settings, job):
    """One read of the topic, cut at 5 s: only ever inside a wait, which reads again until it holds."""
    out = []
    for r in iter_topics(settings, ["telemetry.nccl"], idle_s=0.5, timeout_s=5.0):
        e = decode(r.value)
        if e.job == job:
            out.append((e.id, int(e.data["line"].rsplit(" ", 1)[1].rstrip(")"))))
    return out


def _wait(predicate, agent, what: str):
    """``predicate()`` once it holds, waited for while the agent moves (its publisher's and its
    spool's counters: a hung agent fails in a minute); never a fixed time a busy machine outruns.
    Heartbeats move it all the time, so the outer bound, under pytest's own, ends a livelock."""
    return wait_until(predicate, progress=lambda: (dataclasses.astuple(agent.publisher.stats), len(agent.spool)),
                      stall_s=60, limit_s=240, what=what, explain=lambda: str(agent.statuses()))


def _write(path, first, last):
    with open(path, "a") as f:
        for n in range(first, last):
            f.write(LINE.format(n=n) + "\n")


def test_agent_outage_e2e(tmp_path):
    port = free_port()
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu.log").start()
    settings = KafkaSettings(bootstrap=broker.bootstrap)
    ensure_topics(settings)
    job = f"outage-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "trainer.log"
    log.touch()
    config = AgentConfig(job=job, node="node-o", heartbeat_interval_s=0.2, nvml=False, kernel=False, net=False,
                         trainer_logs=[str(log)], trainer_from_start=True, spool_dir=tmp_path / "spool",
                         send_timeout_s=2.0)
    agent = Agent(config, settings).start()
    trainer = agent.source("trainer")
    try:
        _write(log, 0, 10)
        first: list[tuple[str, int]] = []

        def first_arrived() -> bool:
            first[:] = _nccl_numbers(settings, job)
            return len(first) >= 10

        assert _wait(first_arrived, agent, "the first 10 events on the topic")
        # Judged on the read that saw them, not on a second one a loaded machine may cut short (issue 47).
        assert [n for _, n in first] == list(range(10))

        broker.stop()
        _write(log, 10, 60)  # fault events while the broker is gone
        assert _wait(lambda: trainer.stats.events >= 60, agent, "60 events read from the log")
        assert _wait(lambda: not agent.publisher.connected and len(agent.spool) >= 50, agent, "50 events spooled")
        assert agent.statuses()["publisher"].startswith("broker unreachable")

        # Same port, empty broker (Tansu forgets everything on restart): topics come back.
        broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu.log").start()
        ensure_topics(settings)
        _write(log, 60, 70)
        assert _wait(lambda: agent.publisher.connected and len(agent.spool) == 0, agent, "the spool sent"), agent.statuses()
        got: list[tuple[str, int]] = []

        def all_arrived() -> bool:
            got[:] = _nccl_numbers(settings, job)
            return {n for _, n in got} >= set(range(10, 70))

        assert _wait(all_arrived, agent, "every event on the topic")
    finally:
        agent.stop()
        broker.stop()
    # Every fault event written during and after the outage arrived, in the order written.
    # (At-least-once: a batch that failed half way may come twice, with the same event id.)
    first_seen = {}
    for event_id, n in got:
        first_seen.setdefault(event_id, n)
    numbers = list(first_seen.values())
    assert numbers == list(range(10, 70))
    assert agent.publisher.stats.outages >= 1 and agent.spool.stats.dropped == 0
    assert agent.publisher.stats.spooled >= 50
