"""The vetoes on a hang eviction (diagnosis.hang.verdict): an eviction the evidence calls for becomes an
alert when it would take a node whose dumps cannot be placed (its agent could not read their ranks),
when its suspects only wait on storage the job has an alert about, or when it would take most of the
job's machines. :class:`EvictionVetoes` is a base of :class:`~diagnosis.hang.verdict.HangVerdicts`
(it uses the hang detector's ``config``).
"""

from __future__ import annotations

from faultlens.diagnosis.hang.cues import short as _short
from faultlens.diagnosis.hang.state import HangConfig, JobState, Stall
from faultlens.diagnosis.stacks.outliers import StackVerdict
from faultlens.diagnosis.stacks.rank_threads import read_rank
from faultlens.events.diagnosis_record import Action, Diagnosis
from faultlens.events.topology import Topology

# What a suspect does when it only waits on storage (diagnosis.stacks.wait_primitives' activities).
_STORAGE_WAITS = frozenset({"checkpoint write", "I/O"})


class EvictionVetoes:
    """What turns a hang eviction into an alert, and the note on dumps that cannot be placed."""

    config: HangConfig  # the hang detector's settings, set in its __init__

    # --- dumps that cannot be placed ------------------------------------------------------------
    def _unranked_note(self, stall: Stall, topology: Topology | None, unplaced: dict[str, tuple[int, ...]]) -> str:
        """What a person must hear about the job's nodes whose agent could not read its processes'
        ranks: which, the pids, the variable it read, and that the agent's --rank-env needs fixing."""
        if topology is None:
            return ""
        dumps = {n: ds for n, ds in stall.dumps.unranked().items() if n in topology.ranks_by_node}
        if not dumps:
            return ""
        said = []
        for node in [n for n in topology.nodes if n in dumps][:3]:
            pids = ", ".join(str(d.pid) for d in dumps[node][:8]) + (", ..." if len(dumps[node]) > 8 else "")
            env = next((d.rank_env for d in dumps[node] if d.rank_env), None)
            blamed = f", none of its rank(s) [{_short(unplaced[node])}] is blamed for sending none" if node in unplaced else ""
            said.append(f"{node}: pid(s) {pids} (rank read from {env or 'the agent default'}){blamed}")
        if len(dumps) > 3:
            said.append(f"... {len(dumps) - 3} more node(s)")
        return (
            f"; the agent of {_short(tuple(dumps))} dumped process(es) whose rank it could not read, so their "
            f"stacks cannot be placed and are not used ({'; '.join(said)}): fix its --rank-env"
        )

    def _unless_unplaced(
        self, found: Diagnosis, stall: Stall, verdict: StackVerdict, unplaced: dict[str, tuple[int, ...]]
    ) -> Diagnosis:
        """An eviction the placed stacks call for, unless it takes a node whose dumps could not be
        placed: the stacks that would clear or condemn that node are the ones nobody can place, so a
        person hears it (alert) and nothing is evicted on it. An eviction of other nodes rests on
        their own placed stacks (as when a rank's capture failed), not on the unplaced ones."""
        touched = tuple(n for n in found.nodes if n in unplaced)
        if found.action != "evict" or not touched:
            return found
        stall.inconclusive = True  # GPU-side or watchdog evidence may still name a culprit later
        waited = tuple(sorted(set(verdict.waited_on) & {r for rs in unplaced.values() for r in rs}))
        on = [f"it would evict node(s) {_short(touched)}"]
        if waited:
            on.append(f"the wait chains end at its rank(s) [{_short(waited)}]")
        unranked = stall.dumps.unranked()
        ids = tuple(d.event_id for n in unplaced for d in unranked.get(n, ()))
        nodes = tuple(dict.fromkeys((*unplaced, *found.nodes)))
        return self._alert_instead(
            found,
            f"no eviction: {' and '.join(on)}, and a stack with no rank is no evidence "
            f"against any machine: fix the agent's --rank-env and capture the stacks again",
            nodes=nodes,
            evidence=(found.evidence + ids)[: self.config.evidence_limit],
        )

    def _unless_storage(self, job: JobState, stall: Stall, found: Diagnosis, texts: dict[int, str]) -> Diagnosis:
        """An eviction whose every suspect is stuck writing its checkpoint or in file / network I/O,
        while the job has a storage alert of its own (a shared filer not responding): the machine
        only waits on that storage, and a replacement would hang on the same write. A person hears
        it (alert), nobody is evicted."""
        if found.action != Action.EVICT or not found.ranks or not all(r in texts for r in found.ranks):
            return found
        words = [d for d in job.storage if d.ts >= stall.onset - self.config.storage_lookback_s]
        if not words:
            return found
        doing = {r: read_rank(texts[r]).activity for r in found.ranks}
        if not all(a is not None and not a.waiting and a.activity in _STORAGE_WAITS for a in doing.values()):
            return found
        what = "; ".join(f"rank {r}: {a.activity} in {a.frame}" for r, a in list(doing.items())[:3] if a is not None)
        said = words[-1]
        return self._alert_instead(
            found,
            f"no eviction: the suspects wait on storage ({what}) and the job's storage "
            f"alert says it is failing ({said.detail[:200]}): a shared filer, not the machine",
            evidence=(found.evidence + (said.id,))[: self.config.evidence_limit],
        )

    def _storage_words(self, job: JobState, stall: Stall) -> list[Diagnosis]:
        """The job's storage alerts recent enough to explain the stall (a filer that stopped answering)."""
        return [d for d in job.storage if d.ts >= stall.onset - self.config.storage_lookback_s]

    def _unless_most_of_job(self, found: Diagnosis, topology: Topology) -> Diagnosis:
        """An eviction of more than half of the job's machines (suspects stuck alike on most of
        them, a pipeline that is the whole job) is no localisation: what they share (storage, the
        network, the trainer's code) is likelier than so many machines failing at once, and a job
        without its machines has nothing left to run on. A person hears it, nobody is evicted."""
        machines = len(topology.nodes)
        if found.action != Action.EVICT or machines <= 2 or len(found.nodes) * 2 <= machines:
            return found
        return self._alert_instead(
            found,
            f"no eviction: it would take {len(found.nodes)} of the job's {machines} machines, "
            f"more than half: a cause they share, not so many machines failing at once",
        )

    def _alert_instead(self, found: Diagnosis, why: str, *, nodes: tuple[str, ...] | None = None,
                       evidence: tuple[str, ...] | None = None) -> Diagnosis:
        """What was found, told to a person instead of acted on: the same fault and suspects, an alert at
        the fallback confidence (a new diagnosis, so a new id), the veto's reason after the finding's."""
        return Diagnosis(
            job=found.job,
            ts=found.ts,
            onset=found.onset,
            fault=found.fault,
            action=Action.ALERT,
            nodes=found.nodes if nodes is None else nodes,
            ranks=found.ranks,
            group=found.group,
            confidence=self.config.fallback_confidence,
            evidence=found.evidence if evidence is None else evidence,
            detail=f"{found.detail}; {why}",
        )
