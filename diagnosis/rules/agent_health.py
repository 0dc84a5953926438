"""What the node agent says about its own sight: a GPU that stopped answering NVML, an agent half blind.

- `gpu`/`unresponsive` (collectors/nvml_sampler.py): an NVML call for one GPU did not return
  within its deadline. A wedged GPU stalls the driver calls that touch it (NVSentinel issue #1748:
  DCGM stalled by a degrading GPU, its ECC errors never reported); NVIDIA's answer to a GPU that
  stopped answering is a reset, so the finding is ``gpu_reset_required`` / ``evict_reset_gpu``,
  or ``gpu_lost`` / ``evict`` when a fresh handle call said the GPU is gone. The evidence is the
  event, and the detail quotes the call, the deadline and how many of the node's other GPUs
  answered meanwhile. A node-wide call (no GPU named) stuck is the agent's blindness, not a GPU's
  fault: an alert.
- `heartbeat`/`beat` ``health.blind`` (collectors/agent_health.py): the agent beats, so the node
  is alive, but it cannot see something (NVML, a log, its spool). One ``agent_blind`` alert per
  blind spell naming what it cannot see; never an eviction (a machine is not evicted for what
  nobody saw). The agent's last beat on a deliberate stop (``stopping``) is no blindness.
"""

from __future__ import annotations

from collections.abc import Mapping

from faultlens.diagnosis.rules.base import Finding
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import HeartbeatBeat
from faultlens.events.payloads_node import GpuUnresponsive


class GpuUnresponsiveRule:
    sources = frozenset({"gpu"})

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind != "unresponsive":
            return []
        d = typed(event, GpuUnresponsive)
        gpu = d.gpu
        call = str(d.call or "an NVML call")
        deadline = d.deadline_s
        waited = d.waited_s
        within = f"within {deadline:g}s" if deadline is not None else "within its deadline"
        others = d.others_answered
        if gpu is None:
            return [Finding(
                job=event.job, ts=event.ts, fault="agent_blind", action="alert", nodes=(event.node,),
                entity="agent:nvml", evidence=(event.id,), confidence=1.0,
                detail=f"NVML's node-wide {call} did not return {within} on {event.node}: the agent cannot read "
                       f"any GPU there (alert, no eviction)")]
        uuid = d.uuid
        name = f"GPU {gpu}" + (f" ({uuid})" if uuid else "")
        said = f"NVML {call} on {name} did not return {within}"
        if waited is not None:
            said += f" (given up after {waited:.1f}s)"
        peers = "" if others is None else f"; {others} other GPU(s) of the node answered meanwhile"
        if d.handle == "lost":
            return [Finding(
                job=event.job, ts=event.ts, fault="gpu_lost", action="evict", nodes=(event.node,), entity="gpu_lost",
                evidence=(event.id,), detail=f"{said}, and its handle is gone (NVML_ERROR_GPU_IS_LOST){peers}")]
        # A stall on every GPU at once may be the driver as a whole (still a node that needs a
        # reset), one GPU stalling while its neighbours answer is that GPU: a little more certain.
        confidence = 0.9 if others else 0.8
        return [Finding(
            job=event.job, ts=event.ts, fault="gpu_reset_required", action="evict_reset_gpu", nodes=(event.node,),
            entity=f"gpu:{gpu}", evidence=(event.id,), confidence=confidence,
            detail=f"{said}{peers}: the GPU stopped answering its driver (wedged), NVIDIA's remedy is a GPU reset")]

    def tick(self, now: float) -> list[Finding]:
        return []


class AgentBlindRule:
    sources = frozenset({"heartbeat"})

    def __init__(self) -> None:
        self._blind: dict[tuple[str, str], frozenset[str]] = {}

    def observe(self, event: Envelope) -> list[Finding]:
        if event.kind != "beat":
            return []
        beat = typed(event, HeartbeatBeat)
        health = beat.health
        if health is None:
            return []
        if beat.stopping is True:
            # The agent's last beat on a deliberate stop: its sources have stopped, which is the
            # stop, not a blindness (found: every node of a finished Slurm job alerted as blind).
            self._blind.pop((event.job, event.node), None)
            return []
        spots = [b for b in health.get("blind") or () if isinstance(b, Mapping) and b.get("what")]
        key = (event.job, event.node)
        names = frozenset(str(b["what"]) for b in spots)
        before = self._blind.get(key, frozenset())
        if not names:
            self._blind.pop(key, None)
            return []
        self._blind[key] = names
        if names <= before:
            return []  # the same blindness still: one alert per spell (dedup folds repeats too)
        said = "; ".join(f"{b['what']}: {b.get('why') or 'no reason given'}" for b in spots)
        return [Finding(
            job=event.job, ts=event.ts, fault="agent_blind", action="alert", nodes=(event.node,),
            entity="agent:" + ",".join(sorted(names)), evidence=(event.id,),
            detail=f"the agent on {event.node} beats but cannot see {', '.join(sorted(names))} ({said}): faults "
                   f"there would go unseen; alert, no eviction")]

    def tick(self, now: float) -> list[Finding]:
        return []
