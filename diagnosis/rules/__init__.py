"""Explicit-fault rules, one module per family (DESIGN.md §3).

Node-local rules (:func:`node_rules`) see one node's events and can run on any partition of the
node-keyed telemetry topics. Job-level rules (``comms.FirstFailingRank``,
``liveness.SilenceDetector``) need a whole job and live in the engine's job stage.
"""

from __future__ import annotations

from diagnosis.rules.agent_health import AgentBlindRule, GpuUnresponsiveRule
from diagnosis.rules.base import Finding, Rule
from diagnosis.rules.catalogue import CatalogueRule
from diagnosis.rules.gpu import GpuLostRule, MemoryHealthRule, ThermalRule, XidRule
from diagnosis.rules.host import KernelRule
from diagnosis.rules.net_counters import NetCounterRule
from diagnosis.rules.nic import NicRule
from diagnosis.rules.training import TrainingRule


def node_rules() -> list[Rule]:
    """A fresh set of every node-local rule (each keeps per-node state)."""
    return [XidRule(), GpuLostRule(), MemoryHealthRule(), ThermalRule(), NicRule(), KernelRule(), TrainingRule(),
            NetCounterRule(), CatalogueRule(), GpuUnresponsiveRule(), AgentBlindRule()]


__all__ = ["Finding", "Rule", "node_rules"]
