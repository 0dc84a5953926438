"""Fail-slow localisation by repeated stack rounds (docs/design.md §3: every 10 s, 5 rounds → evict the degrader group).

A slow machine is not stuck, so one snapshot of stacks is noise: healthy ranks are caught in
many places. Repeated over rounds, though, the degrader's group keeps showing up among the
outliers (still computing while its peers already wait). A campaign starts on a ``fail_slow`` /
``capture_stacks`` suspicion (the ML detector's) or when stack rounds simply arrive (a trace).
Each round (dumps sharing ``data.request_id``, else a window of ``round_window_s`` event time)
goes through :func:`diagnosis.stacks.outliers.cluster_stacks`; after ``rounds`` rounds the ranks that were
outliers in most of them are localised. No consistent group → no blame. A group found is evicted
only on evidence a person accepts (diagnosis.peers.slow_evidence): its machine's own counters apart
from its peers', or the same machine blamed by separate captures over ``persist_s``; stacks alone
are an alert and a second capture ``recheck_s`` later, and a slowness that moved is the workload's.

While a campaign with a suspicion wants rounds it emits a ``capture_stacks`` request at most every
``round_window_s`` (a Diagnosis: fault ``fail_slow``, action ``capture_stacks``, nodes = every
node of the job, detail "stack round k/5"). Requests carry confidence ``request_confidence``
(< 0.5) so scorers and the remediation ladder never take them for a finding of their own.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Callable, Iterable

from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.peers.failslow_campaign import Campaign, FailSlowConfig, Round, RoundResult
from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.diagnosis.peers.slow_evidence import SlowEvidence
from faultlens.diagnosis.stacks.dump_set import NodeAnswer, StackDump
from faultlens.diagnosis.stacks.localize import group_counts, localize
from faultlens.diagnosis.stacks.outliers import cluster_stacks
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology

log = logging.getLogger(__name__)


class FailSlowRounds:
    """Stack rounds per job → the degrader group. Detector-shaped: dumps come through ``add_dump``."""

    def __init__(
        self,
        book: JobBook,
        config: FailSlowConfig = FailSlowConfig(),
        stalled_since: Callable[[str, float], float | None] | None = None,
    ):
        self._book = book
        self.config = config
        # When the job's steps stopped, if they have (the hang detector knows): a round taken
        # after that caught a stalled job, whose stacks show where it hangs, not who is slow.
        self._stalled_since = stalled_since
        self._campaigns: dict[str, Campaign] = {}
        self._cooldown_until: dict[str, float] = {}
        # The machines a concluded campaign was about (None: the whole job, for unsolicited rounds):
        # a new suspicion on other machines is a new degradation and gets its own rounds.
        self._cooled_nodes: dict[str, frozenset[str] | None] = {}
        self._own: set[str] = set()
        self._evidence = SlowEvidence(config.evidence, config.stand_confidence, config.request_confidence)

    def observe_diagnosis(self, diagnosis: Diagnosis) -> list[Diagnosis]:
        if diagnosis.id in self._own or diagnosis.fault != "fail_slow" or diagnosis.action != "capture_stacks":
            return []
        job = diagnosis.job
        if diagnosis.ts < self._cooldown_until.get(job, -math.inf):
            cooled = self._cooled_nodes.get(job)
            if cooled is None or cooled & set(diagnosis.nodes):
                return []
        campaign = self._campaigns.get(job)
        if campaign is None:
            campaign = self._campaigns[job] = Campaign(started=diagnosis.ts)
        if campaign.suspicion is None:
            campaign.suspicion = diagnosis
            log.info("job %s: fail-slow suspicion on %s, starting stack rounds", job, ", ".join(diagnosis.nodes))
        return self._maybe_request(job, campaign, diagnosis.ts)

    def observe_window(self, window: NodeWindow) -> None:
        """A node's feature window: the counters a blamed machine is read by against its peers'."""
        self._evidence.observe_window(window)

    def observe_step(self, event: Envelope) -> None:
        """A ``train``/``step``: the ranks' work, by which a rank with more to do is not a slow machine."""
        self._evidence.observe_step(event)

    def add_dump(self, job: str, dump: StackDump) -> list[Diagnosis]:
        if dump.ts < self._cooldown_until.get(job, -math.inf) and job not in self._campaigns:
            return []  # stragglers of the concluded campaign's rounds
        campaign = self._campaigns.get(job)
        if campaign is None:
            campaign = self._campaigns[job] = Campaign(started=dump.ts)
        campaign.dumps_seen += 1
        if dump.request_id is not None and f"request {dump.request_id}" in campaign.closed:
            return []
        out = self._close_due(job, campaign, dump.ts, before=dump)
        if job not in self._campaigns:
            return out  # that close concluded the campaign; this dump comes after it
        rnd = self._round_for(campaign, dump)
        rnd.dumps.add(dump)
        return out + self._close_if_all_answered(job, campaign, rnd, dump.ts)

    def add_node_answer(self, job: str, answer: NodeAnswer) -> list[Diagnosis]:
        """A node's answer to a round's capture that names no rank ("no training process here", or
        a dump whose rank could not be read): its ranks have answered with nothing to cluster (a
        stack that cannot be placed cannot be an outlier of any group), so the round need not
        wait its window for them."""
        campaign = self._campaigns.get(job)
        if campaign is None:
            return []  # no round is waiting: the hang detector judges what it means
        if answer.request_id is not None:
            key = f"request {answer.request_id}"
            # The node may answer before any rank's dump of the round arrives: the round starts here.
            rnd = None if key in campaign.closed else campaign.open.setdefault(key, Round(key))
        else:  # the round of event time it falls in, if one is open
            rnd = next((r for r in campaign.open.values() if r.key.startswith("window")), None)
        if rnd is None:
            return []
        rnd.dumps.add_answer(answer)
        return self._close_if_all_answered(job, campaign, rnd, answer.ts)

    def _close_if_all_answered(self, job: str, campaign: Campaign, rnd: Round, now: float) -> list[Diagnosis]:
        topology = self._book.topology(job)
        if topology is not None and rnd.dumps.answered(topology.ranks_by_node) >= set(topology.by_rank):
            return self._close(job, campaign, rnd.key, now)
        return []

    def _round_for(self, campaign: Campaign, dump: StackDump) -> Round:
        if dump.request_id is not None:
            key = f"request {dump.request_id}"
            return campaign.open.setdefault(key, Round(key))
        # Without a request id a round is a window of event time; a rank seen twice starts the next one.
        for rnd in campaign.open.values():
            if rnd.key.startswith("window") and dump.rank not in rnd.dumps.ranks():
                return rnd
        key = f"window@{dump.ts:.3f}"
        return campaign.open.setdefault(key, Round(key))

    # --- time -----------------------------------------------------------------------------
    def tick(self, now: float) -> list[Diagnosis]:
        out: list[Diagnosis] = []
        for job, campaign in list(self._campaigns.items()):
            out += self._close_due(job, campaign, now)
            if job not in self._campaigns:
                continue
            age = now - campaign.started
            if campaign.suspicion is not None and campaign.dumps_seen == 0 and age >= self.config.no_rounds_timeout_s:
                out.append(self._suspicion_stands(job, campaign, campaign.suspicion, now, "no stack round arrived"))
            elif age >= self.config.campaign_timeout_s:
                out += self._conclude(job, campaign, now, timed_out=True)
            else:
                out += self._maybe_request(job, campaign, now)
        for suspicion in self._evidence.due(now, busy=lambda job: job in self._campaigns):
            campaign = self._campaigns[suspicion.job] = Campaign(started=now, suspicion=suspicion)
            out += self._maybe_request(suspicion.job, campaign, now)
        return out

    def _close_due(self, job: str, campaign: Campaign, now: float, before: StackDump | None = None) -> list[Diagnosis]:
        out: list[Diagnosis] = []
        for key, rnd in list(campaign.open.items()):
            if rnd.dumps.first_ts is not None and now - rnd.dumps.first_ts >= self.config.round_window_s:
                if before is not None and before.request_id is not None and key == f"request {before.request_id}":
                    continue  # a straggler of this very round
                out += self._close(job, campaign, key, now)
                if job not in self._campaigns:
                    break
        return out

    def _maybe_request(self, job: str, campaign: Campaign, now: float) -> list[Diagnosis]:
        if campaign.suspicion is None or campaign.requested >= self.config.rounds:
            return []
        if len(campaign.done) + len(campaign.open) >= self.config.rounds:
            return []
        if campaign.last_request is not None and now - campaign.last_request < self.config.round_window_s:
            return []
        campaign.requested += 1
        campaign.last_request = now
        topology = self._book.topology(job)
        nodes = topology.nodes if topology is not None else campaign.suspicion.nodes
        request = Diagnosis(
            id=f"{campaign.suspicion.id}.round{campaign.requested}",
            job=job,
            ts=now,
            onset=campaign.suspicion.onset,
            fault=FaultClass.FAIL_SLOW,
            action=Action.CAPTURE_STACKS,
            nodes=nodes,
            confidence=self.config.request_confidence,
            detail=f"stack round {campaign.requested}/{self.config.rounds}: capture every rank's stack "
            f"(fail-slow suspicion {campaign.suspicion.id} on {', '.join(campaign.suspicion.nodes)})",
        )
        self._own.add(request.id)
        return [request]

    # --- rounds and the verdict -------------------------------------------------------------
    def _close(self, job: str, campaign: Campaign, key: str, now: float) -> list[Diagnosis]:
        rnd = campaign.open.pop(key)
        campaign.closed.add(key)
        topology = self._book.topology(job)
        if topology is None:
            log.warning("job %s: stack round %s without a topology, dropped", job, key)
            return []
        texts = rnd.dumps.texts(topology.by_rank)
        if len(texts) < self.config.min_round_share * len(topology.by_rank):
            log.info("job %s: stack round %s has %d of %d ranks, not counted", job, key, len(texts), len(topology.by_rank))
            return []
        verdict = cluster_stacks(texts, topology, self.config.stacks)
        campaign.done.append(
            RoundResult(
                key=key,
                ts=rnd.dumps.first_ts or now,
                outliers=verdict.outlier_ranks,
                groups=group_counts(verdict.outlier_ranks, topology),
                evidence=rnd.dumps.evidence(verdict.outlier_ranks, limit=len(verdict.outlier_ranks)),
                seen=frozenset(texts),
            )
        )
        log.info("job %s: stack round %d (%s): %d outlier(s)", job, len(campaign.done), key, len(verdict.outlier_ranks))
        if len(campaign.done) >= self.config.rounds:
            return self._conclude(job, campaign, now, timed_out=False)
        return []

    def _finish(self, job: str, now: float) -> None:
        campaign = self._campaigns.pop(job, None)
        self._cooldown_until[job] = now + self.config.cooldown_s
        suspicion = campaign.suspicion if campaign is not None else None
        self._cooled_nodes[job] = frozenset(suspicion.nodes) if suspicion is not None else None

    def _suspicion_stands(self, job: str, campaign: Campaign, s: Diagnosis, now: float, why: str) -> Diagnosis:
        self._finish(job, now)
        return self._standing(job, campaign, s, now, why)

    def _standing(self, job: str, campaign: Campaign, s: Diagnosis, now: float, why: str) -> Diagnosis:
        """The suspicion ``s`` (the campaign's) as the verdict: evict on two independent signals, else alert."""
        if self._evidence.is_recheck(s):
            action = Action.NONE
            verdict = f"the look at a machine already alerted on got no answer: another in {self._evidence.config.recheck_s:.0f}s" \
                if self._evidence.unanswered(job, now) else "the look at a machine already alerted on got no answer again: the alert stands"
        elif s.confidence >= self.config.stand_confidence:
            action, verdict = Action.EVICT, "the suspicion's own nodes stand on two independent signals"
            if (work := self._evidence.workload(job, s.ranks, now, self._book.topology(job))) is not None:  # more work's
                action, verdict = Action.ALERT, f"{verdict}, but {work}"
        elif self._evidence.moved_lately(job, now):
            action, verdict = Action.NONE, "the job's slowness already moved between machines (the workload's): recorded"
        else:
            action, verdict = Action.ALERT, "a slowdown alone, without stacks, evicts nobody: alert for inspection"
        return _verdict(job, s, now, action, f"{why} within {now - campaign.started:.0f}s: {verdict} ({s.detail})",
                        s.evidence)

    def _conclude(self, job: str, campaign: Campaign, now: float, *, timed_out: bool) -> list[Diagnosis]:
        since = self._stalled_since(job, now) if self._stalled_since is not None else None
        if since is not None and any(r.ts > since for r in campaign.done):
            log.info(
                "job %s: steps stopped at %.0f; %d stack round(s) after it are the stall's, not counted",
                job,
                since,
                sum(1 for r in campaign.done if r.ts > since),
            )
            campaign.done = [r for r in campaign.done if r.ts <= since]
            timed_out = True  # judged on what is left, as when rounds ran out
        rounds = campaign.done
        if len(rounds) < (self.config.min_rounds if timed_out else self.config.rounds):
            if campaign.suspicion is not None:
                return [
                    self._suspicion_stands(job, campaign, campaign.suspicion, now, f"only {len(rounds)} stack round(s) completed")
                ]
            self._finish(job, now)
            return []
        self._finish(job, now)
        topology = self._book.topology(job)
        need = math.ceil(self.config.persist_share * len(rounds))
        per_rank = Counter(r for rnd in rounds for r in rnd.outliers)
        persistent = sorted(r for r, n in per_rank.items() if n >= need)
        # Rounds were counted only under a topology (_close), so it is there; without one nobody is placed.
        place = (
            localize(persistent, topology, cover_share=self.config.stacks.cover_share)
            if persistent and topology is not None
            else None
        )
        counts = [rnd.groups.get(place.group, 0) for rnd in rounds] if place else []
        hits = sum(1 for c in counts if c)
        if place is None or hits < need:
            busiest: Counter[str] = Counter()
            for rnd in rounds:
                busiest.update(rnd.groups)
            log.info(
                "job %s: %d stack rounds, no consistent outlier group (top %s): no blame",
                job,
                len(rounds),
                busiest.most_common(3),
            )
            return self._unconfirmed(job, campaign, rounds, need, topology, now)
        consistency = hits / len(rounds)
        confidence = round(min(0.95, 0.95 * consistency * place.coverage), 4)
        evidence = tuple(e for rnd in rounds for e in rnd.evidence if e)[: self.config.evidence_limit]
        s = campaign.suspicion
        # A suspicion of other machines (a second look at one that moved on) says nothing of when this began.
        onset = s.onset if s is not None and set(s.nodes) & set(place.nodes) else rounds[0].ts
        detail = (
            f"{len(rounds)} stack rounds: outliers in {place.group} per round {counts}; persistent outlier ranks "
            f"{persistent} (outlier in >= {need}/{len(rounds)} rounds), {place.covered}/{place.outliers} in "
            f"{place.group} ({len(place.ranks)} ranks on {len(place.nodes)} node(s))"
        )
        found = Diagnosis(
            job=job,
            ts=now,
            onset=onset,
            fault=FaultClass.FAIL_SLOW,
            action=Action.EVICT,
            nodes=place.nodes,
            ranks=tuple(persistent),
            group=place.group,
            confidence=confidence,
            evidence=evidence,
            detail=detail,
        )
        return [self._evidence.weigh(job, campaign.suspicion, found, topology)]

    def _unconfirmed(
        self, job: str, campaign: Campaign, rounds: list[RoundResult], need: int, topology: Topology | None, now: float
    ) -> list[Diagnosis]:
        """Rounds that blamed no group. A suspicion whose machines the rounds hardly saw (their
        capture failed) was not tested by them: it stands as if no round had come. One they saw and
        did not confirm is not dropped in silence when two signals backed it: a person is told."""
        s = campaign.suspicion
        if s is None or topology is None:
            return []
        suspects = set(s.ranks) or {r for r, place in topology.by_rank.items() if place.node in s.nodes}
        if suspects and sum(1 for rnd in rounds if suspects & rnd.seen) < need:
            return [
                self._standing(
                    job, campaign, s, now, f"the suspects' stacks were missing from {len(rounds)} stack rounds (capture failed?)"
                )
            ]
        if self._evidence.is_recheck(s):  # a second look that found nobody slower: that slowness is over
            self._evidence.over(job)
            return [_verdict(job, s, now, Action.NONE, f"{len(rounds)} stack rounds found no consistent outlier group: "
                             f"{', '.join(s.nodes)} no longer lags its peers, no eviction ({s.detail})")]
        if s.confidence < self.config.stand_confidence:
            return []
        return [_verdict(job, s, now, Action.ALERT, f"{len(rounds)} stack rounds found no consistent outlier group: the "
                         f"slowdown is not confirmed by stacks, alert for inspection ({s.detail})", s.evidence)]

    def restarted(self, job: str, nodes_out: Iterable[str] = ()) -> None:
        """The job was restarted: rounds of the old incarnation compare stacks that no longer exist.

        A suspicion whose suspects are still in the job survives (a slow machine is not fixed by
        restarting the job around it), and so do its completed rounds: which machine lagged is
        still true of the machines that stay. Only the rounds being collected are dropped (half of
        their dumps come from processes that are gone). Evicting a suspect ends the campaign."""
        out = set(nodes_out)
        self._evidence.evicted(job, out)
        campaign = self._campaigns.get(job)
        if campaign is None:
            return
        suspicion = campaign.suspicion
        if suspicion is None or set(suspicion.nodes) & out:
            del self._campaigns[job]
            return
        campaign.closed.update(campaign.open)
        campaign.open.clear()
        campaign.requested = len(campaign.done)
        campaign.last_request = None

    def ended(self, job: str) -> None:
        self._evidence.ended(job)
        self._cooldown_until.pop(job, None)
        self._cooled_nodes.pop(job, None)

    def abandon(self, job: str) -> None:
        """Drop rounds that no suspicion asked for (the hang detector claims the job's dumps)."""
        campaign = self._campaigns.get(job)
        if campaign is not None and campaign.suspicion is None:
            del self._campaigns[job]

    def active(self, job: str) -> bool:
        return job in self._campaigns


def _verdict(job: str, s: Diagnosis, now: float, action: Action, detail: str, evidence: tuple[str, ...] = ()) -> Diagnosis:
    """A fail-slow verdict on the suspicion ``s``: its onset, machines, ranks, group and confidence."""
    return Diagnosis(job=job, ts=now, onset=s.onset, fault=FaultClass.FAIL_SLOW, action=action, nodes=s.nodes,
                     ranks=s.ranks, group=s.group, confidence=s.confidence, evidence=evidence, detail=detail)
