"""The node agent gives its kernel parser its own start (parsing.kernel_quiet, issue 54): a kernel
line stamped before the agent started is boot or history, recorded; one stamped after may act."""

from __future__ import annotations

from faultlens.collectors.agent import Agent, AgentConfig
from faultlens.parsing.kernel_quiet import BOOT_UPTIME_S
from faultlens.streams.config import KafkaSettings

XID79 = "[{:.6f}] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."


def _agent(tmp_path) -> Agent:
    config = AgentConfig(job="j", node="n1", nvml=False, kernel=False, net=False, spool_dir=tmp_path)
    return Agent(config, KafkaSettings(bootstrap="127.0.0.1:1"))


def test_the_kernel_parser_starts_acting_at_the_agents_start(tmp_path):
    agent = _agent(tmp_path)
    start = max(agent.started_uptime, BOOT_UPTIME_S)
    parser = agent._parser_factory("kernel")()
    [before] = parser.feed(XID79.format(start - 30))
    assert (before.data["action"], before.data.get("boot")) == ("none", True)
    parser = agent._parser_factory("kernel")()
    [after] = parser.feed(XID79.format(start + 30))
    assert after.data["action"] != "none" and not after.data.get("boot")
    assert after.data["fault"] == before.data["fault"] == "gpu_lost"


def test_an_agent_started_within_the_boot_window_still_keeps_it(tmp_path):
    agent = _agent(tmp_path)
    agent.started_uptime = 20.0  # started with the machine
    [line] = agent._parser_factory("kernel")().feed(XID79.format(BOOT_UPTIME_S - 10))
    assert line.data["action"] == "none"
