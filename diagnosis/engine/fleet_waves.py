"""Fleet waves: the same fault class on many machines of *different* jobs that share a part of the
fleet (an IB switch, a rack, an NVLink domain or clique) within a short stretch of event time is
one finding about that part (docs/design.md §3, "Waves"), even when no job alone has enough
machines in it to make a wave of its own (diagnosis/engine/waves.py).

A leaf switch that reboots under four jobs of four machines each is sixteen link-downs, four to a
job: below every job's wave threshold, so each machine would be judged alone. Seen across jobs
they are one `wave:ib_switch=<guid>` finding that evicts nobody.

The engine keeps one :class:`FleetWaves` beside its job lanes. Every lane's wave candidate is noted
here (and, on a job-stage member, every other member's too: the node stage sends each candidate
to every `summaries` partition as a `summary/wave_candidate`, so each member holds the same index
in the same event-time order). When a lane's candidate is due (``window_s`` after it, as a job
wave's), :meth:`cause_of` says whether one of its machine's parts has a fleet wave: candidates of
its class within ``window_s`` either side, on machines sharing the part, from at least ``min_jobs``
jobs, at least ``min_nodes`` machines and ``min_share`` of the machines the known topologies put
in that part (of the parts ``wave.causes`` lists for the class, the one that holds most of them).
Then it is absorbed, never judged alone. All of it is a function of the index, so every member
decides the same: the one finding, under the job of the wave's first qualifying candidate (its
*owner*), with the same id everywhere.

Every job the topologies put in the part hears the finding (:meth:`FleetWaves.delivered_under`):
remediation splits `diagnoses` by job, and the member deciding for another job of the part must
pause the wave's class for that job's machines (remediation/wave_pause.py). So each job-stage member
that holds a job of the part writes the finding under each such job it holds, when that job's
lane reaches it in event time: before any straggler of that job judged alone after the wave, in
the same partition. One finding, several deliveries: every store keeps it once, by id.

Evidence of a machine's own (an Xid 79 beside its link-down) is noted here too, so the finding
names the machines judged alone on it, as a job's wave does.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import orjson

from faultlens.diagnosis.engine.thresholds import WaveConfig
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass

_QUIET = frozenset({"none", "alert"})


@dataclass(frozen=True, slots=True, order=True)
class Seen:
    """A wave candidate somewhere in the fleet (ordered by time, then job and machine)."""

    ts: float
    job: str
    node: str
    acting: bool = False  # it asked for more than a record (an eviction, an alert)
    rule: str = ""
    evidence: str = ""


def values_of(entry: Any, key: str) -> set[str]:
    """The values of a topology ``machines`` entry's attribute (a list: one per rail, say)."""
    value = entry.get(key) if isinstance(entry, Mapping) else None
    if value is None or value == "" or value == []:
        return set()
    return {str(v) for v in value} if isinstance(value, (list, tuple)) else {str(value)}


@dataclass(slots=True)
class _Wave:
    fault: str
    cause: str
    key: str
    value: str
    first: Seen  # where its chain of candidates starts
    owner: Seen | None = None
    last_ts: float = float("-inf")
    emitted: tuple | None = None
    diagnosis: Diagnosis | None = None


class FleetWaves:
    """The fleet's wave candidates and the waves across jobs they make (see the module doc)."""

    def __init__(self, config: WaveConfig, machines: Callable[[str], Mapping[str, Any]],
                 jobs: Callable[[], Iterable[str]]) -> None:
        self.config = config
        self.machines = machines
        self.jobs = jobs
        self._seen: dict[str, list[Seen]] = {}  # class → candidates, in time order
        self._keys: set[tuple[str, str, str, float]] = set()
        # class → how many candidates each job has in the index: a class seen in fewer jobs than a
        # fleet wave needs (any one job's wave, however large) is answered without a scan
        self._jobs_of: dict[str, Counter] = {}
        self._values: dict[tuple[str, str, str], set[str]] = {}  # (job, node, key) → values, per basis
        self._waves: dict[tuple[str, str], _Wave] = {}
        # (job, node) → times of its latest evictions asked on evidence of its own (a flood of Xid 79
        # lines is a few entries, not one per line)
        self._own: dict[tuple[str, str], deque[float]] = {}
        self._parts: dict[tuple[str, str], tuple[int, frozenset[str]]] = {}  # part → machines, jobs in it
        # finding id → the jobs of its part (the keys it goes under), for the edge that writes it
        self._hearers: dict[str, tuple[str, ...]] = {}
        self._parts_basis: tuple = ()
        # class → the time up to which its candidates were looked at for a wave this engine forms
        # from the index alone (_form_heard), and those looked at at that very time
        self._heard_until: dict[str, tuple[float, set[Seen]]] = {}
        self.stats: Counter = Counter()

    @property
    def on(self) -> bool:
        return self.config.window_s > 0 and self.config.fleet_min_jobs > 0

    # --- input ------------------------------------------------------------------------------
    def note(self, fault: str, seen: Seen) -> None:
        """A candidate of ``fault``; the same one noted again (a copy per partition, a
        redelivery) counts once."""
        if not self.on:
            return
        key = (fault, seen.job, seen.node, round(seen.ts, 3))
        if key in self._keys:
            return
        self._keys.add(key)
        self._jobs_of.setdefault(fault, Counter())[seen.job] += 1
        bisect.insort(self._seen.setdefault(fault, []), seen)

    def note_own(self, seen: Seen) -> None:
        """An eviction asked on evidence of the machine's own (never held, never a member): the
        fleet wave that holds its machine names it."""
        if not self.on:
            return
        times = self._own.setdefault((seen.job, seen.node), deque(maxlen=8))
        if seen.ts not in times:
            times.append(seen.ts)

    def prune(self, now: float) -> None:
        """Forget candidates no wave can reach any more (three windows back)."""
        horizon = now - 3 * self.config.window_s
        for fault, seen in list(self._seen.items()):
            cut = bisect.bisect_left(seen, Seen(horizon, "", ""))
            if cut:
                jobs = self._jobs_of[fault]
                for s in seen[:cut]:
                    self._keys.discard((fault, s.job, s.node, round(s.ts, 3)))
                    jobs[s.job] -= 1
                    if not jobs[s.job]:
                        del jobs[s.job]
                del seen[:cut]
            if not seen:
                del self._seen[fault]
                del self._jobs_of[fault]
        for machine in [m for m, times in self._own.items() if max(times) < horizon]:
            del self._own[machine]
        self._heard_until = {f: mark for f, mark in self._heard_until.items() if f in self._seen}

    # --- the parts of the fleet -------------------------------------------------------------
    def _entry(self, job: str, node: str) -> Any:
        return (self.machines(job) or {}).get(node)

    def _refresh(self) -> dict[str, Mapping[str, Any]]:
        """Every known job's machines; what was read of them is forgotten when a topology changed."""
        machines = {job: self.machines(job) or {} for job in self.jobs()}
        basis = tuple((job, id(m)) for job, m in sorted(machines.items()))
        if basis != self._parts_basis:
            self._parts, self._parts_basis, self._values = {}, basis, {}
        return machines

    def _part(self, key: str, value: str, machines: Mapping[str, Mapping[str, Any]] | None = None,
              ) -> tuple[int, frozenset[str]]:
        """How many machines the known topologies put in the part ``key=value``, and of which jobs."""
        part = self._parts.get((key, value))
        if part is None:
            known = self._refresh() if machines is None else machines
            inside = {(job, n) for job, m in known.items() for n, e in m.items() if value in values_of(e, key)}
            part = self._parts[(key, value)] = (len({n for _, n in inside}), frozenset(job for job, _ in inside))
        return part

    def part_size(self, key: str, value: str, machines: Mapping[str, Mapping[str, Any]] | None = None) -> int:
        """How many machines the known topologies put in the part ``key=value``."""
        return self._part(key, value, machines)[0]

    def _in_part(self, fault: str, key: str, value: str, low: float, high: float) -> list[Seen]:
        seen = self._seen.get(fault, [])
        lo = bisect.bisect_left(seen, Seen(low, "", ""))
        hi = bisect.bisect_right(seen, Seen(high, "\uffff", "\uffff"))
        out = []
        for s in seen[lo:hi]:
            values = self._values.get((s.job, s.node, key))
            if values is None:
                values = self._values[(s.job, s.node, key)] = values_of(self._entry(s.job, s.node), key)
            if value in values:
                out.append(s)
        return out

    # --- deciding ---------------------------------------------------------------------------
    def cause_of(self, fault: str, job: str, node: str, ts: float) -> str | None:
        """``key=value`` of the part this machine's candidate makes a fleet wave in, or None."""
        if not self.on or len(self._jobs_of.get(fault, ())) < self.config.fleet_min_jobs:
            return None
        c, w = self.config, self.config.window_s
        known = self._refresh()
        entry = self._entry(job, node)
        best: tuple[int, str] | None = None
        for key in c.causes_of(fault):
            for value in sorted(values_of(entry, key)):
                near = self._in_part(fault, key, value, ts - w, ts + w)
                jobs = {s.job for s in near}
                machines = {s.node for s in near}
                if (len(jobs) >= c.fleet_min_jobs and len(machines) >= c.fleet_min_nodes
                        and len(machines) >= c.fleet_min_share * self.part_size(key, value, known)
                        and (best is None or len(machines) > best[0])):
                    # The part that holds the most of them (on a tie, the first the config lists):
                    # a teardown across a 16-machine domain of two 8-machine racks is one finding
                    # about the domain, not one per rack.
                    best = (len(machines), f"{key}={value}")
        return None if best is None else best[1]

    def absorb(self, fault: str, cause: str, seen: Seen) -> None:
        """A lane's due candidate that ``cause_of`` put in a fleet wave: it is judged by the wave."""
        self.stats["fleet_wave_members"] += 1
        self._form(fault, cause, seen)

    def _form(self, fault: str, cause: str, seen: Seen) -> None:
        wave = self._waves.get((fault, cause))
        if wave is not None and seen.ts <= wave.last_ts + self.config.window_s:
            wave.last_ts = max(wave.last_ts, seen.ts)
            return
        key, _, value = cause.partition("=")
        first = self._chain_start(fault, key, value, seen)
        self._waves[(fault, cause)] = _Wave(fault, cause, key, value, first, last_ts=seen.ts)
        self.stats["fleet_waves"] += 1

    def _chain_start(self, fault: str, key: str, value: str, seen: Seen) -> Seen:
        """The earliest candidate of the part reachable back from ``seen`` in steps of at most a window."""
        w = self.config.window_s
        first = seen
        while True:
            before = self._in_part(fault, key, value, first.ts - w, first.ts)
            earliest = before[0] if before else first
            if earliest >= first:
                return first
            first = earliest

    def _members(self, wave: _Wave) -> list[Seen]:
        """The wave's chain: candidates of the part from its first on, each within a window of the last."""
        w = self.config.window_s
        out: list[Seen] = []
        last = wave.first.ts
        for s in self._in_part(wave.fault, wave.key, wave.value, wave.first.ts, float("inf")):
            if s.ts - last > w:
                break
            out.append(s)
            last = s.ts
        return out

    def _owner(self, wave: _Wave, members: list[Seen], now: float | None) -> Seen | None:
        """The wave's first member that makes the wave by itself: the same on every member of the
        job stage, so exactly one of them (the one with its job) writes the finding. A member is
        judged once a window has passed after it (its neighbours have all arrived by then)."""
        if wave.owner is None:
            for s in members:
                if now is not None and now - s.ts < self.config.window_s:
                    return None
                if self.cause_of(wave.fault, s.job, s.node, s.ts) == wave.cause:
                    wave.owner = s
                    break
        return wave.owner

    def _form_heard(self, now: float | None) -> None:
        """Form, from the index alone, the fleet waves due by ``now`` (a lane's time). A lane forms a
        wave when a candidate of its own job is due (Waves._decide); a job-stage member whose jobs
        of the part have no machine in the wave has none, and its jobs never heard the wave their
        remediation must pause for. Each candidate is looked at once, when due by the first lane's
        time to pass it (a window after it: its neighbours have all arrived by then), as a lane's
        own is; a wave formed so is heard by the lanes of its part alone (emit)."""
        if not self._seen:
            return
        w = self.config.window_s
        for fault, seen in self._seen.items():
            if len(self._jobs_of.get(fault, ())) < self.config.fleet_min_jobs:
                continue
            until, at_until = self._heard_until.get(fault, (float("-inf"), set()))
            due_ts = float("inf") if now is None else now - w
            lo = bisect.bisect_left(seen, Seen(until, "", ""))
            hi = bisect.bisect_right(seen, Seen(due_ts, "\uffff", "\uffff"))
            for s in seen[lo:hi]:
                if s.ts == until and s in at_until:
                    continue
                if s.ts > until:
                    until, at_until = s.ts, set()
                at_until.add(s)
                cause = self.cause_of(fault, s.job, s.node, s.ts)
                if cause is not None:
                    self._form(fault, cause, s)
            self._heard_until[fault] = (until, at_until)

    def emit(self, jobs: Iterable[str], now: float | None) -> list[Diagnosis]:
        """The fleet waves that changed, or ended (``now`` None: the end of input), of the parts
        ``jobs`` (a lane's) have machines in: each once per engine, however many of its lanes hear it."""
        jobs = set(jobs)
        self._form_heard(now)
        if not self._waves:
            return []
        w = self.config.window_s
        out: list[Diagnosis] = []
        for key, wave in list(self._waves.items()):
            hears = not jobs.isdisjoint(self._part(wave.key, wave.value)[1])
            if not hears and (now is None or now - wave.last_ts <= 3 * w):
                continue
            members = self._members(wave)
            if members:
                wave.last_ts = max(wave.last_ts, members[-1].ts)
            ended = now is None or now - wave.last_ts > w
            owner = self._owner(wave, members, now)
            if owner is not None and hears and members:
                out.extend(self._diagnosis(wave, owner, members))
            # The owner's lane ends it; another lane lets it go only well after (the owner's job may
            # be on another member of the job stage, or on this one at a later call).
            if (ended and owner is not None and owner.job in jobs) or (now is not None and now - wave.last_ts > 3 * w):
                del self._waves[key]
        return out

    def delivered_under(self, d: Diagnosis, held: Callable[[str], bool]) -> tuple[str, ...]:
        """The jobs whose `diagnoses` partition this engine writes ``d`` to: a fleet wave goes under
        every job of its part that this engine holds (``held``: its input is read here), any other
        diagnosis under its own job."""
        jobs = tuple(j for j in self._hearers.get(d.id, ()) if held(j))
        return jobs or (d.job,)

    def _diagnosis(self, wave: _Wave, owner: Seen, members: list[Seen]) -> list[Diagnosis]:
        c = self.config
        machines = sorted({s.node for s in members})
        jobs = sorted({s.job for s in members})
        acting = any(s.acting for s in members)
        state = (len(machines), len(members), tuple(jobs), acting, self._own_in(wave, members))
        if state == wave.emitted or (wave.emitted is not None and len(members) < wave.emitted[1]):
            return []  # the same; or fewer, its first candidates pruned from the index: what was said stands
        wave.emitted = state
        size, hearers = self._part(wave.key, wave.value)
        own = state[4]
        # Every machine, however many: the person the alert pages checks each of them.
        detail = (f"fleet wave: {wave.fault} on {len(machines)} of the {size} machines under {wave.cause}, in "
                  f"{len(jobs)} jobs ({' '.join(jobs)}), within {c.window_s:.0f}s of each other ({len(members)} "
                  f"finding(s)). One finding about what they share, no machine evicted for it: {' '.join(machines)}")
        if own:
            detail += f"; judged alone on evidence of their own: {' '.join(own)}"
        if wave.diagnosis is None:
            basis = orjson.dumps([owner.job, wave.fault, "fleet-wave", wave.cause, round(owner.ts, 3), owner.node])
            wave.diagnosis = Diagnosis(id=hashlib.blake2b(basis, digest_size=16).hexdigest(), job=owner.job,
                                       ts=owner.ts, onset=wave.first.ts, fault=FaultClass(wave.fault),
                                       action=Action.NONE, group=f"wave:{wave.cause}", rule=owner.rule or None)
        evidence = tuple(dict.fromkeys(s.evidence for s in members if s.evidence))[:32]
        wave.diagnosis = Diagnosis(
            id=wave.diagnosis.id, job=owner.job, ts=max(wave.diagnosis.ts, members[-1].ts), onset=wave.first.ts,
            fault=FaultClass(wave.fault), action=Action.ALERT if acting else Action.NONE, group=f"wave:{wave.cause}",
            count=len(members), evidence=evidence, detail=detail, rule=wave.diagnosis.rule)
        self._hearers[wave.diagnosis.id] = tuple(sorted(hearers | {owner.job}, key=lambda j: (j != owner.job, j)))
        while len(self._hearers) > 1024:  # only the edge's next look needs it
            del self._hearers[next(iter(self._hearers))]
        return [wave.diagnosis]

    def _own_in(self, wave: _Wave, members: list[Seen]) -> tuple[str, ...]:
        """The wave's machines that asked an eviction on evidence of their own around it."""
        if not self._own:
            return ()
        low, high = wave.first.ts - self.config.window_s, wave.last_ts + self.config.window_s
        return tuple(sorted({s.node for s in members
                             if any(low <= t <= high for t in self._own.get((s.job, s.node), ()))}))


def seen_of(ts: float, job: str, node: str, action: str, sympathetic: bool, rule: str, evidence: str) -> Seen:
    """The index's record of a candidate (an alert or an eviction it asked for makes the wave alert)."""
    return Seen(ts, job, node, (action not in _QUIET and not sympathetic) or action == "alert", rule, evidence)
