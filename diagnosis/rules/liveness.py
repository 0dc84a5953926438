"""Liveness: a node whose heartbeats stop while its peers report on is silent → evict.

Job-level because "silent" is judged against the job's other nodes, never against a clock alone.
A node is silent when most of its peers kept reporting (beats, or steps) for the grace period past
its last beat: that is evidence a person accepts ("15 of its 15 peers beat on for 40 s after it
went quiet"). The job's time may move without any event of its own (jobs on its clock move a quiet
job's time, and live the wall clock once nothing on its clock arrives: diagnosis/engine/time_base.py),
and a job whose whole stream stops, because it ended, because a node-stage member died, or because
the consumers fell behind, would otherwise see its nodes cross the grace period one by one in the
order of their beats' phases, and the first few were evicted as "a minority" (issue 32: healthy
machines evicted at the end of a backlog). Now:

- the whole job quiet (no node reported for the grace period of the job's time) is one
  ``telemetry_lost`` alert for the job: it ended, or its telemetry is lost upstream; a record
  (action none) where the wall clock moved its time because nothing on its clock arrived either:
  the input's end or the pipeline's silence, which offline, at a trace's end, is never judged;
- several nodes quiet together (more than ``max_share`` of the job, their last beats within a
  grace period of each other: a rack, a switch, a telemetry partition) are one ``node_silent``
  alert naming them, never evictions;
- nodes whose telemetry shares a partition (events.topics.telemetry_partition) and stopped
  together, while no node of that partition reported since, are one ``node_silent`` alert naming
  the partition: one partition (its leader, its node-stage member) stopping looks, downstream,
  exactly like its nodes dying, and in a large job it is a sixth of the job, under the share
  above (a node on a partition whose other nodes report on is judged alone as before; a node
  alone on its partition has no such evidence either way);
- a node judged alone is evicted only on its peers' evidence, and only once every node that last
  reported within a grace period after it has crossed that period too (then they stopped
  together) or reported past it (then it is its peers' word): at most one beat interval later;
- a peer's word counts once it has reported for a grace period since its own last gap longer than
  that (_going_on): after an outage of the whole job the agents come back each on its own phase.

A node is judged only after it beat at least once (a job still starting is not silent). The alerts on
nodes quiet together (a group, a partition, the whole job) are diagnosis/rules/silence_groups.py's.

Each node's reports are weighed against its peers' on its clock corrected by the error its step
stamps show (diagnosis/rules/step_clocks.py): a healthy machine 30 s behind stamped its last beat
30 s before its peers' last ones and was evicted at a trace's end. Quiet is judged on the later of
its own and the corrected time, so no correction makes a node that reports on look quiet.

A node whose agent said the job's work on it was over before it went quiet is never silent: its
last beat listed no training process while earlier ones listed some (the trainer exited, then the
scheduler's epilog stopped the agent), or said ``stopping`` (the agent was stopped on purpose). A
job's agents are stopped one node at a time when it ends, over minutes on a large job: the first
of them, judged against the peers still beating, was evicted at the end of a healthy job
(tests/fixtures/foreign/job_ends_staggered.jsonl). A dead machine says neither (one that died
while its job was down is judged once the job trains again without it). An agent stopped
while its trainer still ran leaves the node unwatched: one ``alert``, no eviction. The whole job
quiet with every node so ended is the job's end: ``telemetry_lost`` recorded, no alert. The
launcher's own ``job``/``end`` event says it outright: no node of the job is judged from then on,
until a restart or a later step.

Agent down is not node down: the heartbeat comes from the node agent, the step telemetry from
the trainer itself. Beats gone while the node's ranks still report steps is an ``alert`` about
the agent; the node is called silent only once its steps have stopped too.

"Still report steps" is judged against the job's typical node, never its most advanced one, and
by step number where steps carry one: after a checkpoint pause longer than the grace period, the
first node to report its next step is 40 s ahead of every node not yet heard from, and which one
comes first in a batch depends on how the stream was read (found: a split node/job stage read as
a backlog evicted a healthy node whose agent had died, tests/fixtures/foreign/dead_agent.jsonl).
"""

from __future__ import annotations

import bisect
import statistics
from typing import Callable

from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.rules.base import Finding
from faultlens.diagnosis.rules.silence_groups import Beat, QuietTogether
from faultlens.diagnosis.rules.step_clocks import StepClocks
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import HeartbeatBeat, TrainStep

GRACE_S = 30.0
# More than this share of a job's nodes quiet together is not that many machines failing at once.
MAX_SILENT_SHARE = 0.25
# A node's ranks keep pace while their last reported step is at most this many steps behind the
# job's median node (pipeline stages finish a step at different times).
MAX_STEP_LAG = 2
_NEVER = float("-inf")


class SilenceDetector(QuietTogether):
    sources = frozenset({"heartbeat", "train"})

    def __init__(self, grace_s: float = GRACE_S, max_share: float = MAX_SILENT_SHARE,
                 book: JobBook | None = None, partition_of: Callable[[str], int] | None = None) -> None:
        self.grace_s = grace_s
        self.max_share = max_share
        self.book = book
        self.partition_of = partition_of  # node → its telemetry partition; None: no such evidence
        self._beats: dict[str, dict[str, Beat]] = {}
        self._steps: dict[tuple[str, str], float] = {}  # (job, node) → last step report
        self._step_no: dict[tuple[str, str], int] = {}  # (job, node) → step number of that report
        # job → the last report its telemetry_lost named, and whether its clock had stopped then
        self._job_quiet: dict[str, tuple[float, bool]] = {}
        self._worked: set[tuple[str, str]] = set()  # (job, node) whose beats once listed a training pid
        self._last_work: dict[str, float] = {}  # job → its latest beat listing a training pid
        self._ended_jobs: dict[str, float] = {}  # job → when its launcher said it ended (job/end)
        # (job, node) → its first report after a gap longer than the grace (or its first ever): a
        # peer's word counts only once it has reported on for a grace since (see _going_on)
        self._run_start: dict[tuple[str, str], float] = {}
        self.clocks = StepClocks()  # each node's clock error, from its step stamps against its peers'

    def observe(self, event: Envelope) -> list[Finding]:
        if event.source == "train":
            return self.observe_step(event) if event.kind == "step" else []
        if event.kind != "beat":
            return []
        self._note_report((event.job, event.node), event.ts)
        nodes = self._beats.setdefault(event.job, {})
        prev = nodes.get(event.node)
        beat = typed(event, HeartbeatBeat)
        pids = beat.pids
        working = bool(pids) if pids is not None else None
        if prev is None or event.ts >= prev.ts:
            nodes[event.node] = Beat(event.ts, event.id, working=working, stopping=beat.stopping is True)
        if working:
            self._worked.add((event.job, event.node))
            self._last_work[event.job] = max(event.ts, self._last_work.get(event.job, event.ts))
        return []

    def observe_step(self, event: Envelope) -> list[Finding]:
        """:meth:`observe` of a ``train``/``step``, which JobStage.observe_steps calls for every step
        of a run (issue 56: liveness is called for every step and beat, so its state is read once a step)."""
        job, node, ts = event.job, event.node, event.ts
        key = (job, node)
        self._note_report(key, ts)
        steps = self._steps
        last_step = steps.get(key)
        if last_step is None or ts >= last_step:
            steps[key] = ts
            ended = self._ended_jobs
            if ended and ts > ended.get(job, ts):
                del ended[job]  # it trains again
            number = typed(event, TrainStep).step  # every read names its Struct (docs/events.md): no peek at the payload
            if number is None:
                self._step_no.pop(key, None)
            else:  # the latest report's number (a rollback lowers it on every node)
                before = self._step_no.get(key, number)
                self._step_no[key] = number
                if number < before or not number % self.clocks.strides.get(job, 1):
                    return self.clocks.observe(job, node, number, ts, event.id, number < before)
        return []

    def _note_report(self, key: tuple[str, str], ts: float) -> None:
        beats = self._beats.get(key[0])
        beat = beats.get(key[1]) if beats is not None else None
        last = self._steps.get(key, _NEVER)
        if beat is not None and beat.ts > last:
            last = beat.ts
        if ts - last > self.grace_s:
            self._run_start[key] = ts

    def _going_on(self, job: str, heard: dict[str, float]) -> dict[str, float]:
        """The nodes whose reports are a peer's word: those that have reported without a gap longer
        than the grace for at least a grace. After a whole job's telemetry was lost (a pipeline
        outage) every agent comes back on its own beat phase, and the first half back, counted at
        once, made the rest node_silent: 4 healthy machines named (tests/outside/test_outside_streams,
        outage). A node that died during the outage is still judged, a grace after its peers came back."""
        return {n: t for n, t in heard.items() if t - self._run_start.get((job, n), float("-inf")) >= self.grace_s}

    def _ended(self, job: str, node: str, beat: Beat) -> bool:
        """Whether the node's agent said, before it went quiet, that the job's work on it was over:
        a stop, or no training process left, while the job did not train on without it for a grace
        period (restarted after a crash, its peers' trainers listed again: a node that died while
        the job was down is missing from a running job, and judged as any other)."""
        if beat.stopping:
            return True
        return (beat.working is False and (job, node) in self._worked
                and self._last_work.get(job, beat.ts) < beat.ts + self.grace_s)

    def tick(self, now: float, stream_stopped: bool = False) -> list[Finding]:
        """Judge every job at its time ``now``; ``stream_stopped``: the wall clock moved it because
        nothing on the job's clock arrived (diagnosis/engine/time_base.py): the input's end or the
        pipeline's silence, never the job's alone."""
        out: list[Finding] = []
        for job, nodes in self._beats.items():
            self._drop_departed(job, nodes)
            if not nodes or job in self._ended_jobs:
                continue
            shift = self.clocks.offsets.get(job)
            if all(now - beat.ts <= self.grace_s for beat in nodes.values()) or (shift and all(
                    now - max(b.ts, b.ts - shift.get(n, 0.0)) <= self.grace_s for n, b in nodes.items())):
                self._job_quiet.pop(job, None)
                continue
            own = {node: max(beat.ts, self._steps.get((job, node), beat.ts)) for node, beat in nodes.items()}
            latest = max(own.values())
            if now - latest > self.grace_s:
                out.extend(self._whole_job_quiet(job, nodes, own, latest, now, stream_stopped))
                continue  # nobody is judged alone: no peer reported past anyone's silence
            self._job_quiet.pop(job, None)
            # Each node on the job's clock (its own less its measured error, diagnosis/rules/step_clocks.py):
            # what its peers' evidence is weighed in. Quiet is judged on the later of its own and the
            # corrected time: a clock behind has already been heard past its stamps, and one ahead is
            # read as far as its stamps (event-time order) and no further.
            at = {n: b.ts - shift.get(n, 0.0) for n, b in nodes.items()} if shift else {n: b.ts for n, b in nodes.items()}
            heard = {n: t - shift.get(n, 0.0) for n, t in own.items()} if shift else own
            fresh = {n: max(t, heard[n]) for n, t in own.items()} if shift else own
            reports = sorted(heard.values())
            going = {n: heard[n] for n in self._going_on(job, own)}
            going_reports = sorted(going.values())
            silent_for = {n: now - max(b.ts, at[n]) for n, b in nodes.items()}
            ended = {n for n, b in nodes.items() if silent_for[n] > self.grace_s and self._ended(job, n, b)}
            out.extend(self._ended_agents(job, nodes, ended, now))
            quiet = {node: beat for node, beat in nodes.items() if node not in ended and silent_for[node] > self.grace_s
                     and self._peers_went_on(going_reports, going.get(node, float("-inf")), at[node], len(nodes))}
            if not quiet:
                continue
            limit = max(1.0, self.max_share * len(nodes))
            pace = self._pace(job)
            # Who stopped with a node is every node quiet past the grace period, whether or not its
            # peers went on past it yet, and a node is judged alone only once every other node that
            # last reported within a grace period after it has either crossed that period too or
            # reported past it. A node-stage member 40 s behind its peer left 8 of 16 nodes quiet at
            # the job stage; the first of them crossed the peers' test a few seconds of beat phase
            # before its fellows and, judged alone, was evicted (issue 32, starved on CI). The wait
            # is one beat interval at most: a live peer's next report takes it past.
            stopped = {n: b for n, b in nodes.items() if not b.silent and n not in ended and silent_for[n] > self.grace_s}
            for node, beat in sorted(quiet.items()):
                if beat.silent or beat.group_alerted:
                    continue
                together = sorted(n for n in stopped if abs(at[n] - at[node]) <= self.grace_s)
                if len(together) > limit:
                    out.append(self._group_alert(job, together, stopped, at, len(nodes), now))
                    continue
                if self._fellows_undecided(node, at[node], nodes, heard, fresh, now):
                    continue
                mates = self._quiet_partition_mates(node, at[node], nodes, heard)
                if mates:
                    out.append(self._partition_alert(job, node, mates, nodes, heard, now))
                    continue
                out.extend(self._judge_alone(job, node, beat, at[node], pace, reports, now))
        return out

    def _fellows_undecided(self, node: str, beat_at: float, nodes: dict[str, Beat], heard: dict[str, float],
                           fresh: dict[str, float], now: float) -> bool:
        """Whether another node last reported within a grace period after ``node``'s last beat and
        has not been quiet for a grace period yet: it may be stopping with it (then they are judged
        together) or about to report on (then it is its peer's word)."""
        mark = beat_at + self.grace_s
        return any(m != node and not b.silent and heard[m] <= mark and now - fresh[m] <= self.grace_s
                   for m, b in nodes.items())

    def _ended_agents(self, job: str, nodes: dict[str, Beat], ended: set[str], now: float) -> list[Finding]:
        """An agent stopped on purpose while its node's trainer still ran: the node is unwatched."""
        out = []
        for node in sorted(ended):
            beat = nodes[node]
            if beat.agent_alerted or not (beat.stopping and beat.working):
                continue
            beat.agent_alerted = True
            out.append(Finding(
                job=job, ts=now, onset=beat.ts, fault="node_silent", action="alert", nodes=(node,), entity="agent",
                evidence=(beat.id,),
                detail=f"the node agent of {node} was stopped {now - beat.ts:.0f}s ago while its last beat listed "
                       f"training processes: the node is unwatched until its agent runs again (alert, no eviction)"))
        return out

    def _peers_went_on(self, reports: list[float], own_report: float, last_beat: float, size: int) -> bool:
        """Whether more than half of a node's peers reported at least the grace period past its last
        beat (``reports``: every node's latest report, sorted; the node's own is ``own_report``)."""
        peers = size - 1
        if peers < 1:
            return False
        mark = last_beat + self.grace_s
        beyond = len(reports) - bisect.bisect_left(reports, mark)
        if own_report >= mark:
            beyond -= 1  # its own steps are not a peer's word
        return 2 * beyond > peers

    def _judge_alone(self, job: str, node: str, beat: Beat, beat_at: float,
                     pace: tuple[float | None, float | None], reports: list[float], now: float) -> list[Finding]:
        stepped = self._steps.get((job, node))
        # Its ranks keep pace with the rest of the job (a checkpoint pause stops everyone's steps,
        # not this node's alone), and kept stepping well after its beats stopped (a node that died
        # between a beat and a step report is not an agent that died).
        if (stepped is not None and self._keeps_pace(job, node, stepped, pace)
                and (beat.agent_alerted or stepped >= beat.ts + self.grace_s / 2)):
            if beat.agent_alerted:
                return []
            beat.agent_alerted = True
            return [Finding(
                job=job, ts=now, onset=beat.ts, fault="node_silent", action="alert", nodes=(node,),
                entity="agent", evidence=(beat.id,),
                detail=f"no heartbeat from {node} for {now - beat.ts:.0f}s but its ranks reported a step "
                       f"{now - stepped:.0f}s ago: the node agent is down, not the node (alert, no eviction)")]
        beat.silent = True
        mark = beat_at + self.grace_s
        went_on = len(reports) - bisect.bisect_left(reports, mark)
        return [Finding(
            job=job, ts=now, onset=beat_at, fault="node_silent", action="evict", nodes=(node,),
            entity="heartbeat", evidence=(beat.id,),
            detail=f"no heartbeat from {node} for {now - beat.ts:.0f}s (grace {self.grace_s:.0f}s) while "
                   f"{went_on} of its {len(reports) - 1} peers reported on past it, the latest "
                   f"{reports[-1] - beat_at:.0f}s after its last beat{self._clock_note(job, node)}")]

    def _clock_note(self, job: str, node: str) -> str:
        off = self.clocks.offsets.get(job, {}).get(node)
        if not off:
            return ""
        return f" (on its clock corrected by {-off:+.0f}s, the error its step stamps show against its peers')"

    def _pace(self, job: str) -> tuple[float | None, float | None]:
        """The job's typical node: the median of its nodes' last step times and step numbers."""
        times = [t for (j, _), t in self._steps.items() if j == job]
        numbers = [n for (j, _), n in self._step_no.items() if j == job]
        return (statistics.median(times) if times else None, statistics.median(numbers) if numbers else None)

    def _keeps_pace(self, job: str, node: str, stepped: float, pace: tuple[float | None, float | None]) -> bool:
        typical_ts, typical_no = pace
        number = self._step_no.get((job, node))
        if number is not None and typical_no is not None:
            return typical_no - number <= MAX_STEP_LAG
        return typical_ts is not None and typical_ts - stepped <= self.grace_s

    def _drop_departed(self, job: str, nodes: dict[str, Beat]) -> None:
        """A node the job's current topology no longer lists was swapped out: its last beats may
        arrive after the restart event (another topic, no order between them), and it must not
        then be called silent."""
        topology = self.book.topology(job) if self.book is not None else None
        if topology is None:
            return
        for node in [n for n in nodes if n not in topology.ranks_by_node]:
            del nodes[node]
            self.clocks.forget(job, node)
            self._run_start.pop((job, node), None)
            self._steps.pop((job, node), None)
            self._step_no.pop((job, node), None)
            self._worked.discard((job, node))

    def ended(self, job: str, at: float) -> None:
        """The job's launcher said it ended: no node of it is judged until it trains again."""
        self._ended_jobs[job] = at

    def resumed(self, job: str) -> None:
        """The job restarted: its nodes are judged again."""
        self._ended_jobs.pop(job, None)

    def forget(self, job: str, node: str) -> None:
        """The node left the job (evicted, restarted elsewhere): stop expecting its beats."""
        self._beats.get(job, {}).pop(node, None)
        self.clocks.forget(job, node)
        self._run_start.pop((job, node), None)
        self._steps.pop((job, node), None)
        self._step_no.pop((job, node), None)
        self._worked.discard((job, node))
