"""Waves: the same fault class on many machines of a job at once is one finding about what they
share (docs/design.md §3, "Waves"), never an eviction of each.

An NVLink fabric manager that restarts under a whole job makes every machine log Xid 74 within
seconds; a spine switch that reboots takes every machine's IB port down; a teardown makes every
GPU log Xid 45. Judged machine by machine these are hundreds of evictions (a 256-machine fabric
reset was 512 evict diagnoses, and the eviction cap stopped remediation only after 7 healthy
machines were gone). Judged together they are one diagnosis with action ``alert`` (a person
looks) or ``none`` (only echoes, such as Xid 45), naming the cause the machines share when the
topology's ``machines`` entries say it (an NVLink domain or clique, an IB switch, a rack) and
``fleet-wide`` otherwise; its ``group`` is ``wave:<cause>`` and it names no machine.

How, on event time only (the same live, as a backlog, by several members, and offline):

* a candidate is a finding about one machine of a class that can come in waves (thresholds.toml
  ``wave.classes``) that asks something of the machine (not a reattempt of the job); it is held until the job's event time is ``window_s`` past it, the bounded
  delay this costs a genuine fault of those classes;
* when it is due, the machines with a candidate of its class within ``window_s`` either side of
  it are counted (all of them have arrived by then, in event-time order); enough of them
  (``min_nodes`` and ``min_share`` of the job) make it a member of the class's wave, otherwise it
  goes on to be judged alone, as it always was;
* a wave is reported when its first member is due and again, with the same id, when it ends
  (no member for ``window_s``) if it grew, so stores that key by id keep its final form.

Classes not listed are never held: a machine in a wave that shows evidence of its own (Xid 79,
off the bus, ECC counters that rose) is judged and acted on alone, and the wave names it.

Across jobs (diagnosis/engine/fleet_waves.py): a due candidate whose machine shares a part of the fleet
with candidates of other jobs is first offered to the engine's :class:`FleetWaves`; a fleet wave
takes it before the job's own wave is counted. Every lane that has had time hears the fleet waves
of the parts its job has machines in (they come out of the first such lane of the engine to reach
them), so the finding reaches that job's remediation before the job's own stragglers do.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import msgspec
import orjson

from faultlens.diagnosis.engine.fleet_waves import FleetWaves, Seen, seen_of
from faultlens.diagnosis.engine.thresholds import WaveConfig
from faultlens.diagnosis.rules.base import Finding
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass

FLEET_WIDE = "fleet-wide"
_QUIET = frozenset({"none", "alert"})
_EVICTING = frozenset({"evict", "evict_reset_gpu", "inspect_hardware"})
_MACHINE_ACTIONS = _EVICTING | _QUIET


def is_candidate(config: WaveConfig, f: Finding) -> bool:
    """About one machine, of a class that comes in waves, and asking something of the machine
    (an eviction, a person's look, a record, or an echo): a reattempt or a rollback asks it of the
    job, which one wave or many machines would ask alike, so it is not held."""
    return (config.window_s > 0 and f.fault in config.classes and len(f.nodes) == 1
            and (f.sympathetic or f.action in _MACHINE_ACTIONS))


def is_own_evidence(f: Finding) -> bool:
    """An eviction asked of one machine on evidence of its own (an Xid 79, ECC that rose): never
    held, and a wave that holds its machine names it."""
    return len(f.nodes) == 1 and f.action in _EVICTING and not f.sympathetic


def shared_cause(nodes: Iterable[str], machines: Mapping[str, Any], keys: Iterable[str]) -> str:
    """``key=value`` for the first of ``keys`` that every one of ``nodes`` has, with a value they
    all share (a list value, such as one IB switch per rail, shares any of its members); else
    ``fleet-wide``."""
    nodes = list(nodes)
    for key in keys:
        common: set[str] | None = None
        for node in nodes:
            entry = machines.get(node)
            value = entry.get(key) if isinstance(entry, Mapping) else None
            if value is None or value == "" or value == []:
                common = set()
                break
            values = {str(v) for v in value} if isinstance(value, (list, tuple)) else {str(value)}
            common = values if common is None else common & values
            if not common:
                break
        if common:
            return f"{key}={','.join(sorted(common))}"
    return FLEET_WIDE


@dataclass(slots=True)
class _Wave:
    diagnosis: Diagnosis
    onset: float
    last_ts: float
    nodes: set[str] = field(default_factory=set)
    members: int = 0
    acting: bool = False
    evidence: list[str] = field(default_factory=list)
    emitted: tuple | None = None


class Waves:
    """One job lane's wave correlator (the engine keeps one per job, as it keeps a Dedup)."""

    def __init__(self, config: WaveConfig, job_size: Callable[[str], int] | None = None,
                 machines: Callable[[str], Mapping[str, Any]] | None = None, fleet: FleetWaves | None = None,
                 job: str | None = None) -> None:
        self.config = config
        self.job_size = job_size
        self.machines = machines
        self.fleet = fleet
        self.job = job  # the lane's job, when the engine says it
        self._jobs: set[str] = set()  # the jobs of this lane's candidates (the fleet index it prunes)
        self._hears: set[str] = set()  # the jobs whose fleet waves this lane hears: those it had time for
        self._held: dict[tuple[str, str], list[Finding]] = {}
        # (job, class) → (ts, node) of every candidate seen lately, held or judged
        self._seen: dict[tuple[str, str], deque[tuple[float, str]]] = {}
        self._waves: dict[tuple[str, str], _Wave] = {}
        # (job, node) → (ts, class) of evictions asked for on evidence of the machine's own (never held)
        self._own: dict[tuple[str, str], deque[tuple[float, str]]] = {}
        self.stats: Counter = Counter()

    def candidate(self, f: Finding) -> bool:
        return is_candidate(self.config, f)

    # --- input ------------------------------------------------------------------------------
    def admit(self, f: Finding) -> list[Finding]:
        """The findings to judge now: ``f`` itself, or nothing while it waits to see its neighbours."""
        if not self.candidate(f):
            if is_own_evidence(f):
                own = self._own.setdefault((f.job, f.nodes[0]), deque(maxlen=8))
                own.append((f.ts, str(f.fault)))
                if self.fleet is not None:
                    self.fleet.note_own(Seen(f.ts, f.job, f.nodes[0]))
            return [f]
        key = (f.job, str(f.fault))
        if self.fleet is not None:
            self._jobs.add(f.job)
            self._hears.add(f.job)
            self.fleet.note(str(f.fault), seen_of(f.ts, f.job, f.nodes[0], f.action, f.sympathetic, f.rule_id,
                                                  f.evidence[0] if f.evidence else ""))
        self._held.setdefault(key, []).append(f)
        self._seen.setdefault(key, deque()).append((f.ts, f.nodes[0]))
        self.stats["wave_held"] += 1
        return []

    # --- time -------------------------------------------------------------------------------
    def tick(self, now: float, keep_lone: bool = False) -> tuple[list[Finding], list[Diagnosis]]:
        """Candidates due by ``now`` join their wave or are released to be judged alone;
        ``keep_lone``: those of no wave stay held (``now`` is wall time: diagnosis/engine/lane.py)."""
        if self.job is not None:
            self._hears.add(self.job)
        return self._decide(now, keep_lone)

    def flush(self) -> tuple[list[Finding], list[Diagnosis]]:
        return self._decide(None)

    def _decide(self, now: float | None, keep_lone: bool = False) -> tuple[list[Finding], list[Diagnosis]]:
        w = self.config.window_s
        released: list[Finding] = []
        changed: set[tuple[str, str]] = set()
        fleet = self.fleet
        for key in list(self._held):
            held = self._held[key]
            held.sort(key=lambda f: (f.ts, f.nodes[0]))
            n_due = len(held) if now is None else next((i for i, f in enumerate(held) if now - f.ts < w), len(held))
            due, self._held[key] = held[:n_due], held[n_due:]
            lone: list[Finding] = []
            for f in due:
                near = {n for ts, n in self._seen[key] if abs(ts - f.ts) <= w}
                cause = fleet.cause_of(key[1], f.job, f.nodes[0], f.ts) if fleet is not None else None
                if fleet is not None and cause is not None:
                    fleet.absorb(key[1], cause, seen_of(f.ts, f.job, f.nodes[0], f.action, f.sympathetic,
                                                             f.rule_id, f.evidence[0] if f.evidence else ""))
                elif self._is_wave(f.job, len(near)):
                    self._absorb(key, f, near, now)
                    changed.add(key)
                elif keep_lone:
                    lone.append(f)
                else:
                    self.stats["wave_released"] += 1
                    onset = f.onset if f.onset is not None else f.ts
                    # Decided now: the wait is part of its detection latency, as Dedup's hold is.
                    released.append(dataclasses.replace(f, ts=f.ts if now is None else now, onset=onset))
            self._held[key][:0] = lone
            if not self._held[key]:
                del self._held[key]
        out: list[Diagnosis] = []
        for key, wave in list(self._waves.items()):
            ended = key not in self._held and (now is None or now - wave.last_ts > w)
            if key in changed or ended:
                out.extend(self._emit(key, wave))
            if ended:
                del self._waves[key]
        if self.fleet is not None and self._hears:
            out.extend(self.fleet.emit(self._hears, now))
            if now is not None and self._jobs and not keep_lone:
                # By this lane's time: a job far behind the others (an old trace replayed beside live
                # ones) loses its fleet candidates and is judged by its own waves, never a fleet's.
                self.fleet.prune(now)
        if now is not None and not keep_lone:  # what a candidate kept is judged with stays
            for seen in self._seen.values():
                while seen and seen[0][0] < now - 3 * w:
                    seen.popleft()
            for own in self._own.values():
                while own and own[0][0] < now - 3 * w:
                    own.popleft()
            self._seen = {k: v for k, v in self._seen.items() if v}
            self._own = {k: v for k, v in self._own.items() if v}
        return released, out

    def _is_wave(self, job: str, machines: int) -> bool:
        if machines < self.config.min_nodes:
            return False
        size = self.job_size(job) if self.job_size else 0
        return not size or machines >= self.config.min_share * size

    def _absorb(self, key: tuple[str, str], f: Finding, near: set[str], now: float | None) -> None:
        self.stats["wave_members"] += 1
        onset = f.onset if f.onset is not None else f.ts
        wave = self._waves.get(key)
        if wave is None:
            # The id is the wave's first member's, fixed now: what the wave names may still change.
            basis = orjson.dumps([f.job, str(f.fault), "wave", round(onset, 3), list(f.evidence[:4])])
            diag = Diagnosis(id=hashlib.blake2b(basis, digest_size=16).hexdigest(), job=f.job,
                             ts=f.ts if now is None else now, onset=onset, fault=FaultClass(f.fault),
                             action=Action.NONE, group=f"wave:{FLEET_WIDE}", rule=f.rule_id or None)
            wave = self._waves[key] = _Wave(diag, onset, f.ts)
            self.stats["waves"] += 1
        wave.nodes |= near
        wave.members += 1
        wave.last_ts = max(wave.last_ts, f.ts)
        wave.acting = wave.acting or (f.action not in _QUIET and not f.sympathetic) or f.action == "alert"
        if len(wave.evidence) < 32:
            wave.evidence.extend(f.evidence[: 32 - len(wave.evidence)])

    def _emit(self, key: tuple[str, str], wave: _Wave) -> list[Diagnosis]:
        job, fault = key
        machines = self.machines(job) if self.machines else {}
        cause = shared_cause(sorted(wave.nodes), machines or {}, self.config.causes_of(fault))
        own = sorted({n for n in wave.nodes for ts, c in self._own.get((job, n), ())
                      if wave.onset - self.config.window_s <= ts <= wave.last_ts + self.config.window_s})
        state = (len(wave.nodes), wave.members, cause, wave.acting, tuple(own))
        if state == wave.emitted:
            return []
        wave.emitted = state
        size = self.job_size(job) if self.job_size else 0
        of = f" of {size}" if size else ""
        names = sorted(wave.nodes)
        shown = " ".join(names[:8]) + (f" … (+{len(names) - 8})" if len(names) > 8 else "")
        detail = (f"wave: {fault} on {len(names)}{of} machines within {self.config.window_s:.0f}s of each other "
                  f"({wave.members} finding(s)); cause: {cause}. One finding about what they share, no machine "
                  f"evicted for it: {shown}")
        if own:
            detail += f"; judged alone on evidence of their own: {' '.join(own)}"
        diag = msgspec.structs.replace(
            wave.diagnosis, group=f"wave:{cause}",
            action=Action.ALERT if wave.acting else Action.NONE, count=wave.members,
            evidence=tuple(wave.evidence), detail=detail)
        wave.diagnosis = diag
        return [diag]
