"""How the hang detector (diagnosis.hang.detector) decides a stall it collected dumps for: from the
stacks (diagnosis.hang.stack_reading), else from the cues a cluster has without them (idle GPUs, the
NCCL watchdog, diagnosis.hang.cues), else an alert or a reattempt, never an eviction on a guess.

Apart from diagnosis.hang.detector, which tells a stall and collects its dumps, because the verdict is
where the evidence for an eviction is weighed. :class:`HangVerdicts` is a mixin of
:class:`~diagnosis.hang.detector.HangDetector` (it uses its ``_book`` and ``config``).
What vetoes an eviction (unplaced dumps, storage, most of the job) is in diagnosis.hang.vetoes.
"""

from __future__ import annotations

import functools
from typing import AbstractSet, NamedTuple

import msgspec

from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.hang.cues import WATCHDOG_SETTLE_S, idle_nodes, ranks_behind
from faultlens.diagnosis.hang.cues import short as _short
from faultlens.diagnosis.hang.recorder import read_hang
from faultlens.diagnosis.hang.saving import Save, read_save
from faultlens.diagnosis.hang.stack_reading import read_hang_stacks
from faultlens.diagnosis.hang.state import HangConfig, JobState, Stall
from faultlens.diagnosis.hang.vetoes import EvictionVetoes
from faultlens.diagnosis.hang.weak_evidence import Cue, corroboration, refusal
from faultlens.diagnosis.stacks.localize import first_ranks_nodes, localize
from faultlens.diagnosis.stacks.outliers import StackVerdict
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.topology import Topology


class HangVerdicts(EvictionVetoes):
    """HangDetector's verdicts on a stall, and the places and evidence they name."""

    # HangDetector's, set in its __init__: where the topologies are, and its settings.
    _book: JobBook
    config: HangConfig

    # --- places and evidence ----------------------------------------------------------------
    def _nodes_of(self, name: str, job: JobState, ranks: tuple[int, ...]) -> tuple[str, ...]:
        topology = self._book.topology(name)
        if topology is not None:
            nodes = first_ranks_nodes(ranks, topology)
            if nodes:
                return nodes
        return tuple(dict.fromkeys(job.rank_node[r] for r in sorted(ranks) if r in job.rank_node))

    def _step_evidence(self, job: JobState, ranks: tuple[int, ...]) -> tuple[str, ...]:
        return tuple(job.last_step[r][2] for r in ranks[:16] if r in job.last_step)

    # --- the verdict ----------------------------------------------------------------------
    def _decide(self, name: str, job: JobState, stall: Stall, now: float) -> Diagnosis:
        """The verdict on ``stall``, the job's open one."""
        stall.decided = True
        # The machines that hung are those in force when it began: a decision that comes after a
        # restart (the evidence arrived late) must not blame the machines that replaced them.
        topology = self._book.topology(name, at=stall.onset)
        base = functools.partial(Diagnosis, job=name, ts=now, onset=stall.onset, fault=FaultClass.JOB_HANG)
        stalled = f"stalled {now - stall.onset:.0f}s"
        gone = stall.dumps.gone(topology.ranks_by_node) if topology is not None else {}
        unplaced = stall.dumps.unplaced(topology.ranks_by_node) if topology is not None else {}
        unranked = self._unranked_note(stall, topology, unplaced)
        if gone and topology is not None and len(gone) * 2 <= len(topology.nodes):
            return self._trainer_gone(name, job, stall, topology, gone, now, stalled, unranked)
        # Most nodes (or all) finding no trainer says more about the agents (their --proc-pattern /
        # launcher pid) or about a job that exited than about any one machine: nobody is named for it.
        absent = (f"; {len(gone)} of {len(topology.nodes) if topology is not None else '?'} node(s) found no training process "
                  f"[{_short(tuple(gone))}], too many to single one out (check the agents' "
                  f"--proc-pattern / launcher pid)") if gone else ""
        absent += unranked
        answered = stall.failed | {r for rs in gone.values() for r in rs} | {r for rs in unplaced.values() for r in rs}
        # Recorder dumps alone still say who never joined (the watchdog dumps the recorder when the
        # trainer's Python cannot answer: a rank holding the GIL, no py-spy on the machine).
        if topology is not None and (len(stall.dumps) or stall.dumps.recorders(topology.by_rank)):
            texts = stall.dumps.texts(topology.by_rank)
            stray = len(stall.dumps) - len(texts)
            recorders = stall.dumps.recorders(topology.by_rank)
            if recorders:
                verdict = read_hang(texts, recorders, topology, self.config.stacks)
            else:
                verdict = read_hang_stacks(texts, topology, self.config.stacks)
            note = (f"; {stray} dump(s) from ranks outside the topology ignored" if stray else "") + absent
            if verdict.alert:
                # The recorder and the stacks disagree, or too many never joined: a person looks, nobody is evicted.
                return base(
                    action=Action.ALERT, ranks=verdict.outlier_ranks, confidence=self.config.fallback_confidence,
                    detail=f"{stalled}; {verdict.detail}{note}", evidence=self._evidence(job, stall, verdict),
                )
            save = read_save(texts, topology, verdict.outlier_ranks if verdict.localized else ())
            if save is not None and not self._storage_words(job, stall):
                return self._saving(name, job, stall, now, stalled, topology, save)
            if verdict.no_suspect:
                # Nobody is behind: evicting would be a guess. Diagnostics and a reattempt, no eviction.
                return base(
                    action=Action.STOP_TIME_DIAGNOSIS, confidence=self.config.fallback_confidence,
                    detail=f"{stalled}; {verdict.detail}{note}", evidence=self._evidence(job, stall, verdict),
                )
            if verdict.localized:
                found = base(
                    action=Action.EVICT, nodes=verdict.nodes, ranks=verdict.outlier_ranks, group=verdict.group,
                    confidence=verdict.confidence, detail=f"{stalled}; {verdict.detail}{note}",
                    evidence=self._evidence(job, stall, verdict),
                )
                found = self._unless_unplaced(found, stall, verdict, unplaced)
                return self._unless_most_of_job(self._unless_storage(job, stall, found, texts), topology)
            missing = _missing_blame(verdict, topology, self.config, answered)
            if missing is not None:
                found = base(action=Action.EVICT, nodes=missing.nodes, ranks=missing.ranks, group=missing.group,
                             confidence=missing.confidence, detail=f"{stalled}; {missing.why}; {verdict.detail}{note}",
                             evidence=self._evidence(job, stall, verdict))
                found = self._unless_unplaced(found, stall, verdict, unplaced)
                cues = [Cue("silence", missing.why), *self._corroboration(job, stall, missing.nodes, missing.ranks, topology)]
                return self._weak(found, stall, cues, now, need=2)
            why = f"stacks name no outlier ({verdict.detail}){note}"
        elif topology is None:
            why = "no topology for the job, stacks cannot be placed"
        elif gone or unplaced:
            why = f"no usable stack{absent}" + (f"; capture failed on {len(stall.failed)} rank(s)" if stall.failed else "")
        elif stall.failed:
            why = f"no usable stack: capture failed on {len(stall.failed)} rank(s)"
        else:
            why = f"no stack dump arrived within {self.config.collect_timeout_s:.0f}s"
        if job.writing_onset == stall.onset and topology is not None:
            return self._saving(name, job, stall, now, f"{stalled}; {why}", topology, None)
        placed = self._without_stacks(name, job, stall, now, f"{stalled}; {why}")
        if placed is not None:
            return placed
        return self._fallback(name, job, stall, now, f"{stalled}; {why}")

    def _saving(self, name: str, job: JobState, stall: Stall, now: float, stalled: str, topology: Topology,
                save: Save | None) -> Diagnosis:
        """A checkpoint save under way (diagnosis.hang.saving): recorded (action none), the job suspected
        again after ``writing_patience_s`` unless it steps; still no step
        then (the save stuck, or its storage failing) is an alert naming the writers' machines, never
        an eviction: a replacement would write to the same storage."""
        again = job.writing_onset == stall.onset
        save = save or (job.writing_save if again else None)
        job.writing_onset, job.writing_save = stall.onset, save
        evidence = stall.dumps.evidence(save.writers if save else (), limit=self.config.evidence_limit)
        said = save.describe(len(topology.by_rank)) if save is not None else "no stack"
        if not again:
            job.writing_until = now + self.config.writing_patience_s  # then suspected again (HangDetector.tick)
            return Diagnosis(
                job=name, ts=now, onset=stall.onset, fault=FaultClass.JOB_HANG, action=Action.NONE,
                ranks=save.writers if save else (), confidence=self.config.fallback_confidence, evidence=evidence,
                detail=f"{stalled}; {said}: a save under way, not a hang (a reattempt would lose it, an eviction "
                       f"take a machine for a slow filer); looked at again in {self.config.writing_patience_s:.0f}s "
                       f"unless the job steps",
            )
        return Diagnosis(
            job=name, ts=now, onset=stall.onset, fault=FaultClass.JOB_HANG, action=Action.ALERT,
            nodes=save.nodes(topology) if save else (), ranks=save.writers if save else (),
            confidence=self.config.fallback_confidence, evidence=evidence,
            detail=f"{stalled}; {said}: the checkpoint save seen under way has not finished (stuck, or its storage "
                   f"failing): a person looks, no eviction (a replacement would write to the same storage)",
        )

    def _evidence(self, job: JobState, stall: Stall, verdict: StackVerdict) -> tuple[str, ...]:
        ids = stall.dumps.evidence(verdict.outlier_ranks, self.config.evidence_limit)
        return ids + self._step_evidence(job, stall.first_stopped)

    def _trainer_gone(self, name: str, job: JobState, stall: Stall, topology: Topology, gone: dict[str, tuple[int, ...]],
                      now: float, stalled: str, note: str = "") -> Diagnosis:
        """A minority of nodes answered "no training process here" while the rest hang.

        Their processes are gone, and the job cannot step without them: that explains the hang
        and names those nodes. It does not say the machine is bad: a crash, an OOM kill, a user
        error or an operator's kill ends a process on a healthy machine as well. So the node is
        named with the reason, and the action is stop-time diagnosis (checks on the machines, an
        eviction only for one that fails them, else a restart), never an eviction on this alone.
        The other ranks' stacks (their PP peers blocked in send/recv on the gone ranks) show
        victims and are not blamed; the idle GPUs of a node with no trainer are no extra cue.
        """
        stall.inconclusive = False  # no later GPU-side revisit may evict a node for idling without its trainer
        nodes = tuple(n for n in topology.nodes if n in gone)
        ranks = tuple(sorted(r for rs in gone.values() for r in rs))
        answers = stall.dumps.no_trainer()
        said = "; ".join(f"{n}: {answers[n].reason}" for n in nodes[:3])
        if len(nodes) > 3:
            said += f"; ... {len(nodes) - 3} more node(s)"
        cues = [f"node(s) {_short(nodes)} answered the stack capture with no training process ({said}): "
                f"their rank(s) [{_short(ranks)}] are gone while the other ranks wait"]
        confidence = self.config.trainer_gone_confidence
        evidence = tuple(answers[n].event_id for n in nodes)
        beats = {n: job.no_pids[n] for n in nodes if n in job.no_pids}
        if beats:
            # The agent's heartbeats agree: they stopped listing a trainer pid, and when.
            since = min(ts for ts, _ in beats.values())
            cues.append(f"the heartbeats of {_short(tuple(beats))} list no training process since "
                        f"{since - stall.onset:+.0f}s from the last step")
            confidence += self.config.corroboration
            evidence += tuple(i for _, i in beats.values())
        texts = stall.dumps.texts(topology.by_rank)
        if texts:
            verdict = read_hang_stacks(texts, topology, self.config.stacks)
            waited = sorted(set(verdict.waited_on) & set(ranks))
            if waited:
                # The survivors' wait chains end at the gone ranks: the stacks agree on where the hang is.
                cues.append(f"the other ranks' wait chains end at gone rank(s) [{_short(tuple(waited))}]")
                confidence += self.config.corroboration
            cues.append(f"the other ranks' stacks (victims, not blamed): {verdict.detail}")
            evidence += stall.dumps.evidence(waited, max(0, self.config.evidence_limit - len(evidence)))
        else:
            cues.append("no other rank sent a usable stack")
        cues.append("a process gone is not yet a machine at fault (crash, OOM kill, user error): stop-time "
                    "checks on the machines, evict only one that fails them")
        return Diagnosis(
            job=name, ts=now, onset=stall.onset, fault=FaultClass.JOB_HANG, action=Action.STOP_TIME_DIAGNOSIS, nodes=nodes,
            ranks=ranks, confidence=round(min(0.9, confidence), 4),
            evidence=evidence + self._step_evidence(job, stall.first_stopped),
            detail=f"{stalled}; " + "; ".join(cues) + note,
        )

    # --- localisation without stacks ---------------------------------------------------------
    def _without_stacks(self, name: str, job: JobState, stall: Stall, now: float, why: str) -> Diagnosis | None:
        """An eviction from GPU-side or watchdog evidence, corroborated by the other cues; else None."""
        topology = self._book.topology(name)
        if topology is None:
            return None
        idle, idle_why, idle_ev = idle_nodes(job.windows.values(), stall.onset, self.config.idle_share,
                                             self.config.busy_util)
        settled = job.watchdog_first is not None and now - job.watchdog_first >= WATCHDOG_SETTLE_S
        behind, behind_why, behind_ev = ranks_behind(job.progress, topology, settled)
        first = stall.first_stopped
        first_nodes = set(self._nodes_of(name, job, first)) if first and len(first) * 2 <= len(job.last_step) else set()
        if idle:
            ranks = tuple(r for n in idle for r in topology.ranks_by_node.get(n, ()))
            cues, base, evidence = [idle_why], self.config.gpu_confidence, idle_ev
            if behind and set(self._nodes_of(name, job, behind)) & set(idle):
                cues.append(behind_why)
        elif behind:
            ranks, cues, base, evidence = behind, [behind_why], self.config.nccl_confidence, behind_ev
        else:
            return None
        place = localize(ranks, topology, cover_share=self.config.stacks.cover_share)
        nodes = place.nodes if place is not None else tuple(idle) or self._nodes_of(name, job, ranks)
        kinds = [Cue("gpu idle" if idle else "watchdog", cues[0])]
        if len(cues) > 1:
            kinds.append(Cue("watchdog", behind_why))
        extra = [c for c in self._corroboration(job, stall, nodes, ranks, topology) if c.kind not in {k.kind for k in kinds}]
        cues += [c.why for c in extra]
        evidence += tuple(i for c in extra for i in c.evidence)
        if first_nodes & set(nodes):
            cues.append(f"first to stop: rank(s) [{_short(first)}]")  # corroborates the confidence, never the eviction
        confidence = round(min(0.9, base + self.config.corroboration * (len(cues) - 1)), 4)
        stall.inconclusive = False
        found = Diagnosis(
            job=name, ts=now, onset=stall.onset, fault=FaultClass.JOB_HANG, action=Action.EVICT, nodes=nodes, ranks=ranks,
            group=place.group if place is not None else None, confidence=confidence,
            evidence=(evidence + self._step_evidence(job, first))[: self.config.evidence_limit],
            detail=f"{why}; " + "; ".join(cues),
        )
        # Idle GPUs are the machine's own GPUs apart from their spinning peers: at a second look, still
        # apart, they are enough (as an outlier stack is), unless the job's storage is failing (a loader
        # stuck on the filer idles its GPUs too). The watchdog alone only says who waits longest.
        need = 1 if idle and not self._storage_words(job, stall) else 2
        return self._weak(found, stall, kinds + extra, now, need)

    # --- the weakest evidence: two captures and corroboration (diagnosis.hang.weak_evidence) ------
    def _corroboration(self, job: JobState, stall: Stall, nodes: tuple[str, ...], ranks: tuple[int, ...],
                       topology: Topology | None) -> list[Cue]:
        return corroboration(job, nodes, ranks, topology, stall.onset - self.config.gpu_fault_lookback_s)

    def _weak(self, found: Diagnosis, stall: Stall, cues: list[Cue], now: float, need: int) -> Diagnosis:
        """An eviction on the weakest evidence, unless a person would not accept it: then an alert,
        and at the first look a second capture ``relook_s`` later (HangDetector.tick)."""
        if found.action != Action.EVICT:
            return found
        refused = refusal(stall, found.nodes, cues, need)
        if refused is None:
            said = [c.why for c in cues if c.kind != "silence" and c.why not in found.detail]
            kinds = ", ".join(sorted({c.kind for c in cues} - {"silence"}))
            evidence = found.evidence + tuple(i for c in cues for i in c.evidence if i not in found.evidence)
            return msgspec.structs.replace(
                found, id="", evidence=evidence[: self.config.evidence_limit],
                detail=f"{found.detail}; evicted at the second capture, "
                       + (f"corroborated by {kinds}" if len(cues) > 1 else f"{kinds} still")
                       + (f" ({'; '.join(said)})" if said else ""))
        stall.inconclusive = True  # a GPU fault or the watchdog may still name the machine
        again = ""
        if stall.look < 2:
            if stall.relook_at is None:
                stall.named, stall.relook_at = found.nodes, now + self.config.relook_s
            again = f"; capturing every rank's stack again in {self.config.relook_s:.0f}s"
        return msgspec.structs.replace(found, id="", action=Action.ALERT, confidence=min(found.confidence, self.config.fallback_confidence),
                       detail=f"{found.detail}; no eviction: {refused}{again}")

    def _fallback(self, name: str, job: JobState, stall: Stall, now: float, why: str) -> Diagnosis:
        stall.inconclusive = True
        first = stall.first_stopped
        known = len(job.last_step)
        if first and len(first) * 2 <= known:
            nodes = self._nodes_of(name, job, first)
            return Diagnosis(
                job=name, ts=now, onset=stall.onset, fault=FaultClass.JOB_HANG, action=Action.ALERT, nodes=nodes, ranks=first,
                confidence=self.config.fallback_confidence, evidence=self._step_evidence(job, first),
                detail=f"{why}; the first rank(s) to stop [{_short(first)}] are on these node(s), but that alone "
                       f"is no evidence a person would evict on: alert for inspection",
            )
        # Every rank stopped at the same step: nothing singles a machine out, so restart in place.
        topology = self._book.topology(name)
        nodes = topology.nodes if topology is not None else tuple(dict.fromkeys(job.rank_node.values()))
        return Diagnosis(
            job=name, ts=now, onset=stall.onset, fault=FaultClass.JOB_HANG, action=Action.REATTEMPT, nodes=nodes,
            confidence=self.config.fallback_confidence / 2, evidence=self._step_evidence(job, first),
            detail=f"{why}; no rank stopped before the others, no culprit: reattempt in place",
        )


class _MissingBlame(NamedTuple):
    nodes: tuple[str, ...]
    ranks: tuple[int, ...]
    group: str | None
    confidence: float
    why: str


def _missing_blame(verdict: StackVerdict, topology: Topology, config: HangConfig,
                   failed: AbstractSet[int] = frozenset()) -> _MissingBlame | None:
    """When every dump agrees, the ranks that sent none (or garbage) are the suspects of a hang;
    ranks whose capture reported failure (``ok: false``) or whose node has no trainer answered and are not."""
    silent = tuple(sorted((set(verdict.missing_ranks) | set(verdict.bad_ranks)) - set(failed)))
    if not silent or len(silent) * 2 > len(topology.by_rank):
        return None
    place = localize(silent, topology, cover_share=config.stacks.cover_share)
    if place is None:
        return None
    return _MissingBlame(
        nodes=place.nodes, ranks=silent, group=place.group, confidence=round(0.6 * place.coverage, 4),
        why=f"every usable stack agrees; {len(silent)} rank(s) gave no usable dump [{_short(silent)}], "
            f"{place.covered} of them in {place.group}",
    )
