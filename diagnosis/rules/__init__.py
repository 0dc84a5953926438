"""Explicit-fault rules, one module per family (docs/design.md §3).

Node-local rules (:func:`node_rules`) see one node's events and can run on any partition of the
node-keyed telemetry topics. Job-level rules (``comms.FirstFailingRank``,
``liveness.SilenceDetector``) need a whole job and live in the engine's job stage.
"""

from __future__ import annotations

from faultlens.diagnosis.rules.agent_health import AgentBlindRule, GpuUnresponsiveRule
from faultlens.diagnosis.rules.base import Finding, Rule
from faultlens.diagnosis.rules.catalogue import CatalogueRule
from faultlens.diagnosis.rules.gpu_lost import GpuLostRule
from faultlens.diagnosis.rules.gpu_memory import MemoryHealthRule
from faultlens.diagnosis.rules.host import KernelRule
from faultlens.diagnosis.rules.net_counters import NetCounterRule
from faultlens.diagnosis.rules.nic import NicRule
from faultlens.diagnosis.rules.thermal import ThermalRule
from faultlens.diagnosis.rules.training import TrainingRule
from faultlens.diagnosis.rules.xid import XidRule


def node_rules() -> list[Rule]:
    """A fresh set of every node-local rule (each keeps per-node state)."""
    return [XidRule(), GpuLostRule(), MemoryHealthRule(), ThermalRule(), NicRule(), KernelRule(), TrainingRule(),
            NetCounterRule(), CatalogueRule(), GpuUnresponsiveRule(), AgentBlindRule()]


__all__ = ["Finding", "Rule", "node_rules"]
