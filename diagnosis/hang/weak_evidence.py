"""When a hang's weakest evidence may evict (docs/design.md §5): ranks that sent no stack while the
others agree, and the cues a hang has without stacks (idle GPUs, the NCCL watchdog). Pure.

Both rest on what is absent or on one moment, and both name healthy machines in real clusters: a
node whose py-spy cannot attach (no SYS_PTRACE, py-spy missing) or whose agent restarted sends no
dump while the job hangs elsewhere; a job stuck in its data loader on every rank has one node's
GPUs idle first; the ranks that wait on the hung one are behind on the watchdog's count too. So
such an eviction needs what a person would accept:

* two captures: the first verdict is an alert and asks again (``capture_stacks``, look 2); only a
  second look that names the same machines may evict;
* corroboration from outside the capture: the machine's heartbeats list no training process, a
  GPU fault (an Xid: the GPU fell off, needs a reset) on it, or the NCCL watchdog naming its
  ranks. A capture that failed (py-spy could not attach) is none: the agent answered, the machine
  may be fine. The watchdog alone needs one more of another kind (the ranks that wait on the hung
  one are behind too); idle GPUs still apart from their spinning peers at the second look are the
  machine's own and enough, unless the job's storage is failing (a loader stuck on the filer).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from faultlens.diagnosis.hang.cues import ranks_behind, short
from faultlens.diagnosis.hang.state import JobState, Stall
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.topology import Topology

# A diagnosis of these on a machine says its GPU failed (Xid 79 fell off the bus, 48/63/64 memory,
# 74 NVLink, 119/120 GSP): a rank there that sends no stack is not merely unobserved.
GPU_FAULTS = frozenset({FaultClass.GPU_LOST, FaultClass.GPU_RESET_REQUIRED, FaultClass.GPU_MEMORY, FaultClass.NVLINK})


class Cue(NamedTuple):
    kind: str  # one kind counts once: "silence", "gpu idle", "watchdog", "beats", "gpu fault"
    why: str
    evidence: tuple[str, ...] = ()


def note_gpu_fault(job: JobState, diagnosis: Diagnosis) -> None:
    """Keep a job's GPU fault diagnoses by node (the detector's ``observe_diagnosis``)."""
    if diagnosis.fault in GPU_FAULTS and diagnosis.action != Action.NONE:
        for node in diagnosis.nodes:
            job.gpu_faults.setdefault(node, (diagnosis.ts, diagnosis.id, f"{diagnosis.fault}: {diagnosis.detail[:120]}"))


def corroboration(
    job: JobState, nodes: Iterable[str], ranks: Iterable[int], topology: Topology | None, since: float
) -> list[Cue]:
    """What outside the stack capture names ``nodes`` (or their ``ranks``) as at fault."""
    nodes, ranks = tuple(nodes), set(ranks)
    cues: list[Cue] = []
    beats = {n: job.no_pids[n] for n in nodes if n in job.no_pids}
    if beats:
        cues.append(
            Cue("beats", f"the heartbeats of {short(tuple(beats))} list no training process", tuple(i for _, i in beats.values()))
        )
    faults = {n: v for n in nodes if (v := job.gpu_faults.get(n)) is not None and v[0] >= since}
    if faults:
        cues.append(
            Cue(
                "gpu fault",
                "; ".join(f"{n}: {said}" for n, (_, _, said) in list(faults.items())[:3]),
                tuple(i for _, i, _ in faults.values()),
            )
        )
    behind, why, evidence = ranks_behind(job.progress, topology)
    if ranks & set(behind):
        cues.append(Cue("watchdog", why, evidence))
    return cues


def refusal(stall: Stall, nodes: tuple[str, ...], cues: list[Cue], need: int) -> str | None:
    """Why an eviction of ``nodes`` on ``cues`` (the kinds of evidence, the naming one included)
    is refused at this look of ``stall``, or None when a person would accept it."""
    kinds = {c.kind for c in cues}
    if stall.look < 2:
        short_of = "" if len(kinds) >= need else f", and {_kinds(kinds)} alone corroborates nothing"
        return f"one capture is no evidence to evict on{short_of}"
    if not set(nodes) <= set(stall.named):
        return f"the second capture names other machines ({short(nodes)}, first {short(stall.named) or 'none'})"
    if len(kinds) < need:
        return (
            f"the second capture agrees, but nothing outside it corroborates ({_kinds(kinds)} only; "
            f"no heartbeat without the trainer, GPU fault or NCCL watchdog names the machine, a failed "
            f"capture is none, and idle GPUs are none while the job's storage is failing)"
        )
    return None


def _kinds(kinds: set[str]) -> str:
    return " + ".join(sorted(kinds)) or "nothing"
