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

# One name per module (docs/CONTRIBUTING.md, "Layout"): from the repository root this folder is also
# importable by its bare name, which would load a second copy of every module in it (a second enum,
# an exception class that the other copy's `except` misses). Below the imports (E402), which name faultlens.
if not __name__.startswith("faultlens."):
    raise ImportError(f"{__name__} is faultlens.{__name__}: import it, or run it with python -m, by that name "
                      "(one name per module: docs/CONTRIBUTING.md, Layout)")

__all__ = [
    "DEFAULT_MIX", "EPISODE_S", "JOB_WIDE", "SIM_CLASSES", "FaultPlan", "SimConfig", "SimRun",
    "SimulatedCluster", "choose_layout", "lines", "plan_for", "random_plan", "simulate",
]
