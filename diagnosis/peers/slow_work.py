"""Whether a rank the fail-slow rounds blame was slow for its work or had more of it (docs/design.md §3).

Stack rounds and compute times see a rank that keeps computing while its peers wait; a slow GPU and
a rank with more to do (an MoE's hot expert, longer sequences in its micro-batches) look alike in
them. The trainer can tell them apart: ``train``/``step``'s optional ``work`` is how much this rank
did in the step, in a unit the same for every rank of the job (TrainerHook.step(work=...)). Over the
look's steps (the last ``span_s``, the five rounds' minute, so that a hot expert that began just
before is not diluted by the steps before it; further back, up to ``lookback_s``, until a rank has
``min_steps``) each rank's compute time per unit of work is set against its peers' (median: the
other ranks of its pipeline stage, else of the job):

* ``workload``: the blamed rank did at least ``more_work`` times its peers' work per step and took
  about their time per unit of it (under ``unit_apart`` times): its slowness is the work's, and no
  look (however many) evicts it;
* ``machine``: its time per unit of work at least ``unit_apart`` times its peers' (the same work,
  slower). That is said in the verdict's detail, never counted as evidence: it is the slowdown
  itself, read by the trainer's own clock, not a second signal beside it (a GPU's counters are),
  and a rank's cost per unit may differ for reasons no machine has (longer sequences cost more per
  token, the last pipeline stage holds the output layer). The look goes on as without ``work``.

Where the blamed ranks' steps carry no ``work`` (or no ``compute_s``), nothing is judged and fail-slow
reads as before. Steps are folded into ``bucket_s`` buckets per rank, so the state is at most
ranks × lookback_s / bucket_s small records per job.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import median

from faultlens.diagnosis.peers.anomaly import MIN_PEERS, MIN_REL_DEV
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainStep
from faultlens.events.topology import Topology


@dataclass(frozen=True, slots=True)
class WorkConfig:
    span_s: float = 60.0  # the steps read: the last minute before the look's verdict (its rounds) ...
    lookback_s: float = 300.0  # ... or further back until min_steps, a job with long steps (the steps kept)
    bucket_s: float = 10.0
    min_steps: int = 3  # a rank with fewer steps within the lookback is not judged (nor a peer)
    slower: float = 1.0 + MIN_REL_DEV  # compute per step this far above the peers' is a slowness to explain
    more_work: float = 1.15  # the workload's: at least this times the peers' work per step ...
    unit_apart: float = 1.15  # ... with time per unit under this times theirs; at or above it, the machine's


@dataclass(frozen=True, slots=True)
class RankWork:
    """One rank's steps in the lookback: how many, their work and their compute time (sums)."""

    steps: int
    work: float
    compute_s: float

    @property
    def per_step(self) -> float:
        return self.work / self.steps

    @property
    def compute_per_step(self) -> float:
        return self.compute_s / self.steps

    @property
    def per_unit(self) -> float:
        return self.compute_s / self.work


@dataclass(frozen=True, slots=True)
class WorkVerdict:
    """``kind``: "workload" (the blamed ranks had more work: no eviction) or "machine" (same work, slower)."""

    kind: str
    why: str


def judge_work(
    blamed: Iterable[int],
    ranks: Mapping[int, RankWork],
    config: WorkConfig = WorkConfig(),
    stage: Mapping[int, int] | None = None,
) -> WorkVerdict | None:
    """What the steps say of the ``blamed`` ranks' slowness against their peers' (pure). A rank's
    peers are the unblamed ranks of its pipeline stage (``stage``: rank → pp coordinate; stages run
    different layers, so their costs differ) where MIN_PEERS of them have ``work``, else the job's.

    None when they cannot say: a blamed rank without ``work`` in its steps, fewer than MIN_PEERS
    peers that have it, or no blamed rank computing longer per step than its peers (nothing to explain)."""
    blamed = sorted(set(blamed))
    judged = {r: w for r, w in ranks.items() if w.steps >= config.min_steps and w.work > 0}
    if not blamed or any(r not in judged for r in blamed):
        return None
    norms: dict[int | None, tuple[float, float, float] | None] = {}  # stage → peers' medians
    of: dict[int, tuple[float, float, float]] = {}  # blamed rank → its peers' (work, unit, compute)
    for r in blamed:
        key = stage.get(r) if stage is not None else None
        if key not in norms:
            norms[key] = _peer_medians(judged, set(blamed), stage, key)
        norm = norms[key]
        if norm is None:
            return None
        of[r] = norm
    slow = [r for r in blamed if judged[r].compute_per_step >= config.slower * of[r][2]]
    if not slow:
        return None
    work = {r: judged[r].per_step / of[r][0] for r in slow}
    unit = {r: judged[r].per_unit / of[r][1] for r in slow}
    apart = [r for r in slow if unit[r] >= config.unit_apart]
    if apart:
        said = ", ".join(
            f"rank {r} took {unit[r]:.2f}x its peers' compute time per unit of work doing {work[r]:.2f}x their work"
            for r in apart
        )
        return WorkVerdict("machine", f"{said} (the trainer's work per step): the same work, slower, a machine's")
    if all(work[r] >= config.more_work for r in slow):
        said = ", ".join(f"rank {r} did {work[r]:.1f}x its peers' work" for r in slow)
        units = ", ".join(f"{unit[r]:.2f}x" for r in slow)
        return WorkVerdict(
            "workload",
            f"{said} in its last steps, at its peers' compute time per unit of "
            f"work ({units} theirs): the workload's (a hot expert, uneven batches), not a machine's, no eviction",
        )
    return None


def _peer_medians(
    judged: Mapping[int, RankWork], blamed: set[int], stage: Mapping[int, int] | None, key: int | None
) -> tuple[float, float, float] | None:
    """The unblamed ranks' median work per step, time per unit and compute per step: those of
    stage ``key`` where MIN_PEERS of them have steps, else the job's; None with fewer peers."""
    peers = [w for r, w in judged.items() if r not in blamed]
    if stage is not None and key is not None:
        same = [w for r, w in judged.items() if r not in blamed and stage.get(r) == key]
        peers = same if len(same) >= MIN_PEERS else peers
    if len(peers) < MIN_PEERS:
        return None
    return (
        median(w.per_step for w in peers),
        median(w.per_unit for w in peers),
        median(w.compute_per_step for w in peers),
    )


class StepWork:
    """Per job and rank, the recent steps that carry ``work`` and ``compute_s``, in time buckets."""

    def __init__(self, config: WorkConfig = WorkConfig()) -> None:
        self.config = config
        # job → rank → buckets [start, steps, work, compute_s], oldest first
        self._ranks: dict[str, dict[int, deque[list[float]]]] = {}

    def observe(self, event: Envelope) -> None:
        """A ``train``/``step`` event; one without ``work`` is not kept."""
        try:  # (not ``data``: a step read as events.step_reading.StepEvent builds it from its bytes)
            step = typed(event, TrainStep)
        except InvalidEvent:
            return  # the payload check owns step validation (and its dead letters), as the hang detector says
        if step.work is None or step.compute_s is None or step.rank is None:
            return
        buckets = self._ranks.setdefault(event.job, {}).setdefault(step.rank, deque())
        start = event.ts - event.ts % self.config.bucket_s
        if buckets and buckets[-1][0] == start:
            last = buckets[-1]
            last[1] += 1
            last[2] += float(step.work)
            last[3] += float(step.compute_s)
        elif not buckets or start > buckets[-1][0]:  # a step late past its bucket is left out
            buckets.append([start, 1.0, float(step.work), float(step.compute_s)])
        horizon = event.ts - self.config.lookback_s - self.config.bucket_s
        while buckets and buckets[0][0] < horizon:
            buckets.popleft()

    def ranks(self, job: str, now: float) -> dict[int, RankWork]:
        """Each rank's steps of the ``span_s`` before ``now``, or as far back (``lookback_s`` at
        most) as its last ``min_steps`` steps go."""
        c = self.config
        out: dict[int, RankWork] = {}
        for rank, buckets in self._ranks.get(job, {}).items():
            steps, work, compute = 0, 0.0, 0.0
            for start, n, w, s in reversed(buckets):
                age = now - start
                if age < 0:
                    continue  # steps after the verdict's time (a look judged late in event time)
                if age > c.lookback_s or (age > c.span_s and steps >= c.min_steps):
                    break
                steps, work, compute = steps + int(n), work + w, compute + s
            if steps:
                out[rank] = RankWork(steps, work, compute)
        return out

    def forget(self, job: str) -> None:
        """The job ended or restarted: its steps are no later look's (another incarnation's processes)."""
        self._ranks.pop(job, None)

    def judge(self, job: str, blamed: Iterable[int], now: float, topology: Topology | None = None) -> WorkVerdict | None:
        if job not in self._ranks:
            return None  # no step of the job carried work: fail-slow reads as before
        stage = {p.rank: p.pp for p in topology.ranks} if topology is not None and topology.pp > 1 else None
        return judge_work(blamed, self.ranks(job, now), self.config, stage)
