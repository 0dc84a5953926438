"""The simulated cluster: a seeded, time-stepping N×G training job with labelled fault injection.

Public API: :class:`SimConfig`, :class:`FaultPlan`, :func:`random_plan`, :class:`SimulatedCluster`
(``advance(until_ts)``, ``apply(command)``, ``labels``), :func:`simulate` (events of a whole run)
and :mod:`simulator.lines` (every raw log line template, for the parsers' tests).
"""

from faultlens.simulator import lines
from faultlens.simulator.cluster import SimulatedCluster
from faultlens.simulator.config import SimConfig, choose_layout
from faultlens.simulator.plan import DEFAULT_MIX, EPISODE_S, JOB_WIDE, SIM_CLASSES, FaultPlan, random_plan
from faultlens.simulator.run import SimRun, plan_for, simulate

__all__ = [
    "DEFAULT_MIX", "EPISODE_S", "JOB_WIDE", "SIM_CLASSES", "FaultPlan", "SimConfig", "SimRun",
    "SimulatedCluster", "choose_layout", "lines", "plan_for", "random_plan", "simulate",
]
