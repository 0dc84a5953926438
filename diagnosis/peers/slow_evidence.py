"""When the machine the stack rounds blame for a slowdown may be evicted (docs/design.md §3, fail-slow).

Stack rounds show which ranks keep computing while their peers wait; they cannot say why. A GPU
that is really slow and a rank that simply has more work (an MoE's hot expert, an uneven batch)
look the same in them. Evicting a healthy machine costs a large job more than a slow one does
(the restart of every rank, and the slowness comes back on the spare that takes the same rank),
so the rounds evict only on evidence a person accepts:

* hardware: the blamed machine's own counters apart from its peers' in the same windows (SM
  clocks or power below theirs, throttle flags, PCIe replays: diagnosis.peers.anomaly's
  ``HARDWARE`` less temperature, which explains nothing alone), or the suspicion that started
  the rounds already stood on such a drift (confidence at least ``CORROBORATED``);
* persistence: the same machine blamed by separate captures ``recheck_s`` apart, spanning at
  least ``persist_s``, and the slowness never seen elsewhere in the job in between.

Otherwise the first look is an alert naming the machine, and a second capture follows
``recheck_s`` later. A slowness that moved to another machine between captures is the
workload's: an alert, and for ``moved_memory_s`` stacks alone blame nobody in that job. Where the
blamed ranks' steps carry ``work`` (diagnosis.peers.slow_work), a rank that did more work at its
peers' time per unit of it is the workload's at every look: an alert, another look ``recheck_s``
later, and no chain of looks that persistence could evict on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from faultlens.diagnosis.peers.anomaly import HARDWARE, MIN_PEERS, MIN_REL_DEV, Z_SOFT, peer_scores
from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.diagnosis.peers.slow_work import StepWork, WorkConfig, WorkVerdict
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology

# What may explain a slowdown on the blamed machine itself (temperature alone never does).
OWN_HARDWARE = tuple(f for f in HARDWARE if f != "temp_c")


@dataclass(frozen=True, slots=True)
class SlowEvidenceConfig:
    lookback_s: float = 120.0  # the windows read for the blamed machine's counters
    apart_share: float = 0.5  # ... apart from its peers' in at least this share of them
    recheck_s: float = 600.0  # the next capture after a look that found no hardware evidence
    persist_s: float = 1200.0  # looks at the same machine spanning this long evict it (3 looks)
    moved_memory_s: float = 3600.0  # after the slowness moved, stacks alone blame nobody this long
    unanswered_retries: int = 1  # a look no stack round answered is asked once more
    persist_looks: int = 3  # answered looks a persistence needs (two 20 minutes apart, a missed look between, are not)
    work: WorkConfig = field(default_factory=WorkConfig)  # the blamed ranks' work against their peers'


@dataclass(frozen=True, slots=True)
class Look:
    """One capture's verdict: which machines the rounds blamed, and when."""

    ts: float
    onset: float
    nodes: tuple[str, ...]
    ranks: tuple[int, ...]
    group: str | None


@dataclass
class SlowHistory:
    """Per job: the looks that blamed machines on stacks alone, and when the slowness last moved."""

    looks: list[Look] = field(default_factory=list)
    moved_at: float | None = None
    recheck_at: float | None = None  # a second look is due then (None: none asked for)
    recheck_id: str = ""  # the id of the chain of looks, for the requests a recheck sends
    rechecks: int = 0
    unanswered: int = 0  # looks asked for in a row that no stack round answered
    explained: Look | None = None  # the last look whose slowness the ranks' work explained (no chain)

    def last(self) -> Look | None:
        """The look a second one goes back to: the chain's last, else the last one the work explained."""
        return self.looks[-1] if self.looks else self.explained


@dataclass(frozen=True, slots=True)
class Judgement:
    """What a look without hardware evidence means: ``first`` (alert, look again), ``again`` (the
    same machine, not yet for long enough: recorded), ``persistent`` (evict), ``moved`` (alert)."""

    kind: str
    why: str
    onset: float


def judge_look(history: SlowHistory, look: Look, config: SlowEvidenceConfig) -> Judgement:
    """Fold ``look`` into ``history`` and say what it means (pure but for the history it updates)."""
    previous = history.looks[-1] if history.looks else None
    # Looks asked for but never answered (an agent down, a capture refused) do not end the chain.
    if previous is not None and look.ts - previous.ts > (2 + history.unanswered) * config.recheck_s:
        history.looks, previous = [], None  # that chain ended long ago (its slowness went away)
    moved_lately = history.moved_at is not None and look.ts - history.moved_at < config.moved_memory_s
    if previous is not None and not set(previous.nodes) & set(look.nodes):
        history.moved_at = look.ts
        history.looks = [look]
        history.recheck_at = None  # the workload's: no further captures asked for
        return Judgement(
            "moved",
            f"the slowness moved from {', '.join(previous.nodes)} (ranks "
            f"{list(previous.ranks)}, {look.ts - previous.ts:.0f}s before) to "
            f"{', '.join(look.nodes)}: the workload's (routing, a hot expert, uneven "
            f"batches), not a machine's",
            look.onset,
        )
    history.looks.append(look)
    first = history.looks[0]
    span = look.ts - first.ts
    if moved_lately:
        history.recheck_at = None
        return Judgement(
            "moved",
            f"the slowness already moved between machines of this job "
            f"{look.ts - (history.moved_at or look.ts):.0f}s ago: stacks alone blame nobody "
            f"here for {config.moved_memory_s:.0f}s",
            look.onset,
        )
    if len(history.looks) >= config.persist_looks and span >= config.persist_s:
        history.recheck_at = None
        return Judgement(
            "persistent",
            f"the same machine blamed by {len(history.looks)} separate captures over "
            f"{span / 60:.0f} min, the slowness seen nowhere else",
            first.onset,
        )
    history.recheck_at = look.ts + config.recheck_s
    if len(history.looks) == 1:
        return Judgement(
            "first",
            f"stacks alone, its counters like its peers': no eviction on a first look, "
            f"another capture in {config.recheck_s:.0f}s",
            first.onset,
        )
    return Judgement(
        "again",
        f"blamed again ({len(history.looks)} looks over {span / 60:.0f} min); evicted "
        f"once blamed over {config.persist_s / 60:.0f} min",
        first.onset,
    )


class RecentWindows:
    """Each job's feature windows of the last ``lookback_s``: the blamed machine's counters against its peers'."""

    def __init__(self, lookback_s: float) -> None:
        self.lookback_s = lookback_s
        self._windows: dict[str, dict[float, dict[str, NodeWindow]]] = {}

    def observe(self, window: NodeWindow) -> None:
        by_start = self._windows.setdefault(window.job, {})
        by_start.setdefault(window.start, {})[window.node] = window
        horizon = window.start - self.lookback_s
        for start in [s for s in by_start if s < horizon]:
            del by_start[start]

    def forget(self, job: str) -> None:
        self._windows.pop(job, None)

    def apart(self, job: str, nodes: tuple[str, ...], share: float) -> tuple[str, ...]:
        """For each of ``nodes`` whose own hardware sat apart from its peers' in at least ``share``
        of the recent windows that measured it: what (its worst feature against the peer median)."""
        found: dict[str, list[str]] = {n: [] for n in nodes}
        seen: dict[str, int] = dict.fromkeys(nodes, 0)
        for _, windows in sorted(self._windows.get(job, {}).items()):
            if len(windows) < MIN_PEERS:
                continue
            for s in peer_scores(list(windows.values())):
                if s.node not in found or not any(f in s.z for f in OWN_HARDWARE):
                    continue
                seen[s.node] += 1
                bad = [(s.z[f], f) for f in OWN_HARDWARE if s.z.get(f, 0.0) >= Z_SOFT and s.rel.get(f, 0.0) >= MIN_REL_DEV]
                if bad:
                    z, f = max(bad)
                    found[s.node].append(f"{f} {s.values[f]:.3g} vs peer median {s.medians[f]:.3g} ({z:.1f} robust sigmas)")
        return tuple(
            f"{n}: {hits[-1]} in {len(hits)}/{seen[n]} windows"
            for n, hits in found.items()
            if hits and len(hits) >= share * seen[n]
        )


class SlowEvidence:
    """Per job, the evidence the fail-slow rounds' blame is weighed on: the recent windows, the looks
    at machines blamed on stacks alone, and the second looks they ask for (diagnosis.peers.failslow)."""

    def __init__(self, config: SlowEvidenceConfig, stand_confidence: float, request_confidence: float) -> None:
        self.config = config
        self.stand_confidence = stand_confidence
        self.request_confidence = request_confidence
        self._windows = RecentWindows(config.lookback_s)
        self._work = StepWork(config.work)
        self._history: dict[str, SlowHistory] = {}
        self._rechecks: set[str] = set()  # the ids of the suspicions a second look starts with

    def observe_window(self, window: NodeWindow) -> None:
        self._windows.observe(window)

    def observe_step(self, event: Envelope) -> None:
        self._work.observe(event)

    def workload(self, job: str, ranks: tuple[int, ...], now: float, topology: Topology | None) -> str | None:
        """Why the slowness of ``ranks`` is their work's, if their steps say so; else None."""
        verdict = self._work.judge(job, ranks, now, topology)
        return verdict.why if verdict is not None and verdict.kind == "workload" else None

    def is_recheck(self, suspicion: Diagnosis) -> bool:
        return suspicion.id in self._rechecks

    def moved_lately(self, job: str, now: float) -> bool:
        """Whether the job's slowness moved between machines within ``moved_memory_s``: the workload's."""
        history = self._history.get(job)
        return history is not None and history.moved_at is not None and now - history.moved_at < self.config.moved_memory_s

    def due(self, now: float, busy: Callable[[str], bool]) -> list[Diagnosis]:
        """The suspicions of the second looks due now, for the jobs that are not ``busy`` with rounds."""
        out = []
        for job, history in self._history.items():
            if history.recheck_at is None or now < history.recheck_at or busy(job):
                continue
            last = history.last()
            if last is None:
                continue
            history.recheck_at = None
            history.rechecks += 1
            suspicion = Diagnosis(
                id=f"{history.recheck_id}.look{history.rechecks + 1}", job=job, ts=now, onset=last.onset,
                fault=FaultClass.FAIL_SLOW, action=Action.CAPTURE_STACKS, nodes=last.nodes, ranks=last.ranks,
                group=last.group, confidence=self.request_confidence,
                detail=f"look {history.rechecks + 1} at {', '.join(last.nodes)}, blamed on stacks alone {now - last.ts:.0f}s ago",
            )  # fmt: skip
            self._rechecks.add(suspicion.id)
            out.append(suspicion)
        return out

    def weigh(self, job: str, suspicion: Diagnosis | None, found: Diagnosis, topology: Topology | None = None) -> Diagnosis:
        """The rounds' blame ``found`` (an eviction of its nodes) as it stands on the evidence."""
        history = self._history.setdefault(job, SlowHistory())
        look = Look(found.ts, found.onset, found.nodes, found.ranks, found.group)
        hardware = self._windows.apart(job, found.nodes, self.config.apart_share)
        s = suspicion
        if s is not None and not self.is_recheck(s) and s.confidence >= self.stand_confidence and set(s.nodes) & set(found.nodes):
            hardware += (f"the suspicion saw {', '.join(s.nodes)}'s hardware drift with its slowdown",)
        work = self._work.judge(job, found.ranks, found.ts, topology)
        if work is not None and work.kind == "workload":
            return self._explained(history, look, s, found, work, hardware)
        said = f"; {work.why}" if work is not None else ""  # the machine's: said, not evidence (slow_work)
        if hardware:
            history.looks, history.recheck_at = [look], None  # a spare slow at the same rank is then the workload's
            return msgspec.structs.replace(
                found, detail=f"{found.detail}; its own hardware apart from its peers': {'; '.join(hardware)}{said}"
            )
        judged = judge_look(history, look, self.config)
        history.unanswered = 0
        action = {"persistent": Action.EVICT, "again": Action.NONE}.get(judged.kind, Action.ALERT)
        done = msgspec.structs.replace(
            found, id="", action=action, onset=judged.onset, detail=f"{found.detail}; {judged.why}{said}"
        )
        if judged.kind == "first":
            history.recheck_id, history.rechecks = done.id, 0
        return done

    def _explained(
        self,
        history: SlowHistory,
        look: Look,
        s: Diagnosis | None,
        found: Diagnosis,
        work: WorkVerdict,
        hardware: tuple[str, ...],
    ) -> Diagnosis:
        """A look whose slowness the blamed ranks' work explains: an alert saying so, and another look
        ``recheck_s`` later (the work may even out and the slowness stay). It starts no chain of looks
        (a chain it broke starts again), so no number of such looks evicts by persistence; nor do the
        counters apart of a GPU no slower per unit of work than its peers' (more work heats it)."""
        history.looks, history.explained, history.unanswered = [], look, 0
        history.recheck_at = look.ts + self.config.recheck_s
        counters = (
            f"; its counters apart from its peers' ({'; '.join(hardware)}) do not make it slower per unit" if hardware else ""
        )
        done = msgspec.structs.replace(
            found, id="", action=Action.ALERT, detail=f"{found.detail}; {work.why}{counters}; another capture in "
            f"{self.config.recheck_s:.0f}s",
        )  # fmt: skip
        if s is None or not self.is_recheck(s):
            history.recheck_id, history.rechecks = done.id, 0
        return done

    def unanswered(self, job: str, now: float) -> bool:
        """A second look got no stack round: ask once more a ``recheck_s`` later (the machine blamed
        may be the one that cannot answer, and a missed look must not end a chain that persists);
        False once a retry went unanswered too: the alert stands, no more looks."""
        history = self._history.get(job)
        if history is None or history.last() is None or history.unanswered >= self.config.unanswered_retries:
            return False
        history.unanswered += 1
        history.recheck_at = now + self.config.recheck_s
        return True

    def ended(self, job: str) -> None:
        """The job ended: its steps' work, windows and looks are kept no longer (a fleet runs
        thousands of jobs a month through one engine)."""
        self._work.forget(job)
        self._history.pop(job, None)
        self._windows.forget(job)

    def over(self, job: str) -> None:
        """A second look found nobody slower: that slowness ended."""
        self._history.pop(job, None)

    def evicted(self, job: str, nodes_out: set[str]) -> None:
        """The job restarted without ``nodes_out``: no second look at them; their looks stay, so a spare
        slow at the same ranks is seen as the workload's. The old incarnation's steps go."""
        self._work.forget(job)
        history = self._history.get(job)
        last = history.last() if history is not None else None
        if history is not None and last is not None and set(last.nodes) & nodes_out:
            history.recheck_at = None
