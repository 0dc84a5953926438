"""The agent follows NVIDIA fabric manager's log: its NVSwitch lines go out as parsed kernel
events. No broker: the publisher spools, and the spool is read back."""

from __future__ import annotations

import dataclasses
import time

from faultlens.collectors.agent import Agent, AgentConfig
from faultlens.events.envelope import decode
from faultlens.streams.config import KafkaSettings
from tests.progress import wait_until

# leptonai/gpud components/accelerator/nvidia/fabric-manager/log_matcher_test.go
FATAL = ("[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch "
         "pci bus id 00000000:86:00.0 physical id 3 port 33")
INFO = "[Feb 27 2025 14:10:02] [INFO] [tid 1808] multicast group 1 is allocated."


def _wait(predicate, agent, source, what: str):
    """``predicate()`` once it holds, waited for while the agent moves (its spool, the source's
    counters and polls), not a fixed 20 s a busy machine outruns (issue 47)."""
    return wait_until(predicate, progress=lambda: (len(agent.spool), dataclasses.astuple(source.stats), source.last_poll),
                      stall_s=60, limit_s=240, what=what, poll_s=0.05, explain=lambda: str(agent.statuses()))


def test_fabric_manager_lines_become_kernel_events(tmp_path):
    fm = tmp_path / "fabricmanager.log"
    fm.write_text(f"{FATAL}\n")  # already there at start: old news, not re-sent
    config = AgentConfig(job="j", node="n1", heartbeat_interval_s=5.0, nvml=False, kernel=False, net=False,
                         fabric_manager_log=str(fm), spool_dir=tmp_path / "spool", create_topics=False)
    agent = Agent(config, KafkaSettings(bootstrap="127.0.0.1:1"))
    assert "fabric_manager" in [s.name for s in agent.sources]
    source = agent.source("fabric_manager")
    agent.start()
    try:
        # The follower has scanned the file once (it starts at its end): what is written next is news.
        assert _wait(lambda: source.last_poll is not None, agent, source, "the fabric manager log's first scan")
        with open(fm, "a") as f:
            f.write(f"{INFO}\n{FATAL}\n")

        def sxids():
            return [e for e in (decode(r.value) for r in agent.spool.peek(10_000)) if e.kind == "sxid"]

        assert _wait(lambda: len(sxids()) >= 1, agent, source, "the sxid event spooled")
        time.sleep(0.3)  # room for a wrong second event to show up
        found = sxids()
    finally:
        agent.stop()
    [event] = found
    assert (event.source, event.node, event.data["sxid"], event.data["action"]) == ("kernel", "n1", 20034, "evict")
    assert event.data["rule"] == "fm.nvswitch_fatal"


def test_off_unless_named(tmp_path):
    config = AgentConfig(job="j", node="n1", nvml=False, kernel=False, net=False, create_topics=False,
                         spool_dir=tmp_path / "spool")
    assert "fabric_manager" not in [s.name for s in Agent(config, KafkaSettings(bootstrap="127.0.0.1:1")).sources]
