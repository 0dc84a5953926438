"""The simulated cluster's launcher, as far as a dual-phase reproduction goes (ByteRobust): it runs each
group of the plan on its own, as trainer_hooks.reproduction does for a real job, and reports which
groups reproduced the fault on `check`/`replay` and `check`/`replay_done`, on the simulated clock.

What a group's run would show comes from the faults active when the reproduction starts, as a real run
would show them, and nothing else: a group holding a machine of an active fault reproduces it; a
fault of the whole job (a loss spike, a bad batch, a bug in the script) reproduces on every group;
with no fault active, no group reproduces (the ladder then asks a person). Without this the
ladder's reproduction rung waited an hour for an answer the demo never gave, and recorded every later
fault of the job without a command.
"""

from __future__ import annotations

import logging

from faultlens.events.command import Command
from faultlens.simulator import SimulatedCluster
from faultlens.trainer_hooks.reproduction import run_reproduction

log = logging.getLogger(__name__)


def is_reproduction(cmd: Command) -> bool:
    return cmd.action == "restart" and (cmd.params or {}).get("mode") == "dual_phase_replay"


def group_outcome(cluster: SimulatedCluster, nodes: tuple[str, ...]) -> tuple[dict[str, int | None], bool]:
    """(exit code per machine, hung) of one group's reproduction run, from the faults active now."""
    active = [ep for ep in cluster.episodes.values() if not ep.ended]
    culprits = {n for ep in active for n in ep.nodes}
    whole_job = any(ep.stops_job and not ep.nodes for ep in active)
    return {n: 1 if whole_job or n in culprits else 0 for n in nodes}, False


def run_simulated_reproduction(cluster: SimulatedCluster, cmd: Command) -> dict[str, list[int]]:
    """Run the reproduction the command asks for; its events go out with the cluster's next ones."""
    def publish(event) -> None:
        cluster.emit_at(cluster.now, event.node, event.source, event.kind, event.data)

    try:
        failing = run_reproduction(cmd, cluster.cfg.job, tuple(cluster.slots), lambda nodes: group_outcome(cluster, nodes),
                             timeout_s=0.0, publish=publish, emit=lambda _: None)
    except ValueError as exc:  # a plan the launcher cannot run: a real one would say so in its log
        log.warning("simulated launcher: reproduction %s not run: %s", cmd.id, exc)
        return {}
    log.info("simulated launcher: reproduction %s: failing groups %s", cmd.id, failing)
    return failing
