"""Two node-stage and two job-stage diagnosis members reading a replayed trace: as a backlog (in
this process, bench.testbed.backlog_split) or live (`faultlens diagnose` processes started before
the trace is replayed), the two halves of the split-stage equivalence tests.

Read as a backlog, a stage's members are stopped once they have read all their input
(everything upstream had written by then: the replay for the node stage, the node stage's last
flush for the job stage), not by waiting out an idle time: the job stage's 25 s idle stop, there
to outlast the node stage's own idle stop and flush, was half of each of these tests. Their idle
stop stays on as the backstop, held until the node stage is done (hold_idle_stop). Stopped either
way, a member hands on what its merge holds and its handler flushes. Live, the node processes get
SIGTERM once their group committed the telemetry to the end (each flushes and says its last word,
as at its idle stop); the job processes' reads cannot be asked, so they end at their idle stop,
which only has to outlast a pause in what the node stage says: a live node member says a word at
least every KEEPALIVE_S (5 s), so the job stage goes idle only once they all stopped. Both together: the live waves tests 58.6 -> 37 s and
53.4 -> 30 s (-n 0, the shared 2-core box); the idle stops alone (node 15 s, job 30 s) were the rest.

How far a stage has read is told two ways. The node stage commits its input to the end (a commit
comes once a record was handed to the handler and its outputs acknowledged). The job stage does
not: the node stage's last records after its members' last words stay in its merge until its own
stop drains them (what a writer said last binds: events/partition_mark.py), and its commit stays
below them. Its members are asked instead, from their own loop (a kafka-python consumer is not to
be touched from another thread), through the runner's progress hook, which the job stage does not
use otherwise: where each one's consumer stands on the partitions it owns.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from kafka.structs import TopicPartition

from bench.testbed.backlog_split import finish_members, start_members
from faultlens.demo.processes import faultlens
from faultlens.events import topics
from faultlens.events.envelope import decode
from faultlens.streams.config import KafkaSettings
from faultlens.streams.kafka_client import open_consumer
from faultlens.streams.reader_ends import seek_past_end
from faultlens.streams.replay import replay_trace
from tests.kafka_fixtures import wait_for_records
from tests.progress import files_size, wait_until

STALL_S = 90.0  # members that read, commit or say nothing new for this long: stuck, not slow
# A live job-stage process's idle stop: three of the node stage's keepalive words (KEEPALIVE_S).
LIVE_JOB_IDLE_S = 15


def end_offsets(settings: KafkaSettings, topic_names: Iterable[str]) -> dict[TopicPartition, int]:
    """Every partition of ``topic_names`` and its end offset now: the offset after its last
    record, fetched (streams/reader_ends.py), not the embedded broker's listed end, its last
    batch's start, which a group's commit passes with that batch's records still held."""
    looker = open_consumer(settings, None)
    try:
        parts = [TopicPartition(t, p) for t in topic_names for p in sorted(looker.partitions_for_topic(t) or ())]
        looker.assign(parts)
        return seek_past_end(looker, parts)
    finally:
        looker.close()


def committed_to_end(settings: KafkaSettings, group: str, topic_names: Iterable[str], *,
                     running: Callable[[], bool], progress: Callable[[], object], what: str) -> bool:
    """Wait until ``group`` has committed every partition of ``topic_names`` up to the end offsets
    they have now, or until ``running()`` says its members all stopped on their own; returns
    whether the commits reached the end. Fails only when neither the commits nor ``progress()``
    (the members' own) moved for STALL_S."""
    names = tuple(topic_names)
    ends = [(tp, end) for tp, end in end_offsets(settings, names).items() if end]
    looker = open_consumer(settings, group)  # never subscribes: only asks
    behind: list = [None]

    def ended() -> bool:
        # One request a partition: the scan stops at the first one behind (most of the wait).
        behind[0] = None
        for tp, end in ends:
            done = looker.committed(tp) or 0
            if done < end:
                behind[0] = (tp.topic, tp.partition, end - done)
                break
        return behind[0] is None or not running()

    try:
        wait_until(ended, progress=lambda: (behind[0], progress()), stall_s=STALL_S,
                   what=f"{what} to commit {', '.join(names)} to the end", poll_s=0.5,
                   explain=lambda: f"first partition behind (and by how much): {behind[0]}")
    finally:
        looker.close()
    return behind[0] is None


class ReadProbe:
    """A job-stage member's word, said from its own loop, on where its consumer stands: set as the
    runner's ``on_progress`` (called at least every streams/runner/progress.KEEPALIVE_S, never
    mid-rebalance), it writes nothing downstream. Once :attr:`ends` is set, each word records the
    partitions the member owns, whether it has read each to its end, and its records read."""

    def __init__(self, runner, upstream_done: threading.Event) -> None:
        self.runner = runner
        self.upstream_done = upstream_done  # set once the node stage is done (hold_idle_stop)
        self.ends: dict[TopicPartition, int] | None = None
        self.word: tuple[frozenset[TopicPartition], bool, int] | None = None
        self._lock = threading.Lock()

    def expect(self, ends: dict[TopicPartition, int]) -> None:
        with self._lock:
            self.ends, self.word = ends, None

    def __call__(self, said, reads, behind, idle, done=False) -> tuple:
        ends = self.ends
        if ends is not None:
            consumer = self.runner.consumer
            try:
                own = frozenset(consumer.assignment())
                done = all(consumer.position(tp) >= ends.get(tp, 0) for tp in own)
            except Exception:  # noqa: BLE001 - a position not known yet: not read to the end
                own, done = frozenset(), False
            with self._lock:
                if self.ends is ends:
                    self.word = (own, done, self.runner.stats.records_in)
        return ()


def job_members_read_to_end(settings: KafkaSettings, members, topic: str = topics.SUMMARIES) -> None:
    """Wait until start_members' job-stage ``members`` have together read ``topic`` to its end
    offsets now: each said (after now) that it read what it owns to the end, each owns some and
    they own every partition once, and none read anything since it said so. Or until they all stopped."""
    probes = [r.on_progress for _, r, _ in members]
    assert all(isinstance(p, ReadProbe) for p in probes), "members started without probe_reads()"
    ends = end_offsets(settings, [topic])
    for p in probes:
        p.expect(ends)

    def ended() -> bool:
        if not any(t.is_alive() for t, _, _ in members):
            return True
        words = [p.word for p in probes]
        if any(w is None or not w[1] for w in words):
            return False
        # each owns some: a member still joining owns none, and the others, stopped then, would
        # have read and judged its share (fewer partitions than members: not these tests)
        owned = [tp for w in words for tp in w[0]]
        return (all(w[0] for w in words) and len(owned) == len(set(owned)) and set(owned) == set(ends)
                and all(w[2] == r.stats.records_in for w, (_, r, _) in zip(words, members, strict=True)))

    wait_until(ended, progress=lambda: tuple((p.word, r.stats.records_in) for p, (_, r, _) in zip(probes, members, strict=True)),
               stall_s=STALL_S, what=f"the job stage to read {topic} to its end", poll_s=0.3,
               explain=lambda: f"ends {ends}; words {[p.word for p in probes]}")


def hold_idle_stop(members) -> threading.Event:
    """Hold start_members' job-stage ``members``' idle stop until the returned event is set (the
    node stage is done): their idle time still counts from the last record read, but a member due
    before then waits. A node stage starved at load can say nothing for longer than a job member's
    idle time; the job member that stopped beside it never read what it wrote after, and its
    partitions went to a member still reading, which rebuilt them and judged both halves (CI:
    test_silence_clocks' member held the quiet job and its mate)."""
    done = threading.Event()
    for _, r, _ in members:
        r.idle_together = lambda due: due and done.is_set()
    return done


def probe_reads(members) -> None:
    """Give start_members' job-stage members a :class:`ReadProbe` (the job stage announces nothing),
    their idle stop held until its ``upstream_done`` is set (:func:`hold_idle_stop`)."""
    done = hold_idle_stop(members)
    for _, r, _ in members:
        assert r.on_progress is None, "a member that announces its progress: not the job stage"
        r.on_progress = ReadProbe(r, done)


def stop_together(settings: KafkaSettings, members) -> None:
    """Stop start_members' members at once, then finish_members (each handler's last output written)."""
    for _, r, _ in members:
        r.stop()
    finish_members(settings, members)


def start_job_members(settings: KafkaSettings, n: int, group: str) -> list:
    """start_members' job-stage members, each with its ReadProbe (idle stop at 25 s: the backstop)."""
    members = start_members(settings, "job", n, group, idle_s=25)
    probe_reads(members)
    return members


# How many fresh node-stage members finish_node_members starts, one after another, for a group whose
# members all stopped before it committed the telemetry to the end.
NODE_RESTARTS = 3


def finish_node_members(settings: KafkaSettings, nodes, node_group: str) -> None:
    """start_members' node-stage members of ``node_group`` stopped once it committed the telemetry
    to the end, their handlers' last summaries written.

    A member that stops first leaves its partitions to the others; the last one may stop with input
    unread. On a starved machine one member was kicked from the group (no heartbeat within the 6 s
    session), the others read their partitions to the end and stopped at their idle stop meanwhile,
    and its join, which they had left mid-way, never completed (kafka-python 3 on Tansu): its bounded
    run gave up after REBALANCE_IDLE_GRACE_S, 5,836 records of 18 partitions never handed on, and the
    job stage judged two hung jobs without a third of their nodes (test_silence_backlog_wide at load
    10: both evictions missed; reproduced by stopping the test's process 20 s as the node stage
    read). The runner now rejoins such a join as a fresh member (up to MAX_REJOINS) and never
    idle-stops while its group's input is uncommitted (docs/streaming.md); this harness stays as the
    backstop a supervisor is: the members' idle stop is held meanwhile (a deployed member has none: it
    stays up), so none leaves mid-way through another's join, and a member that stops anyway (its
    bounded run gave up after its rejoins) is followed by a fresh one, as a deployed member that exits
    is started again by its supervisor and reads what its group left, until the group committed the
    telemetry to the end."""
    members = list(nodes)
    held = hold_idle_stop(members)
    for restart in range(NODE_RESTARTS + 1):
        if committed_to_end(settings, node_group, topics.TELEMETRY_TOPICS,
                            running=lambda members=members: any(t.is_alive() for t, _, _ in members),
                            progress=lambda members=members: tuple(r.stats.records_in for _, r, _ in members),
                            what=node_group):
            break
        if restart == NODE_RESTARTS:
            held.set()
            stop_together(settings, members)
            raise AssertionError(f"{node_group}: {len(members)} node-stage members stopped with telemetry unread")
        fresh = start_members(settings, "node", 1, node_group, 6.0)
        for _, r, _ in fresh:
            r.idle_together = lambda due: due and held.is_set()
        members += fresh
    held.set()
    stop_together(settings, members)


def upstream_done(jobs) -> None:
    """The node stage is done: the job members' idle stop (their backstop) may come."""
    for _, r, _ in jobs:
        r.on_progress.upstream_done.set()


def finish_job_members(settings: KafkaSettings, jobs) -> None:
    """Once the node stage is done: the job stage stopped together once it read what the node
    stage wrote to the end (none leaves first, to have its partitions read again by the other)."""
    upstream_done(jobs)
    job_members_read_to_end(settings, jobs)
    stop_together(settings, jobs)


def finish_stages(settings: KafkaSettings, nodes, node_group: str, jobs) -> None:
    """The node stage stopped once it committed the telemetry to the end, then the job stage once
    it read what the node stage wrote to the end."""
    try:
        finish_node_members(settings, nodes, node_group)
    finally:
        upstream_done(jobs)  # a failed node stage must not leave the job members up for good
    finish_job_members(settings, jobs)


def run_two_and_two_live(settings, trace: Path, workdir: Path, prefix: str) -> None:
    """Start two node-stage and two job-stage members (groups ``<prefix>n-*`` / ``<prefix>j-*``),
    replay ``trace`` at full speed, stop the node members once their group committed it to the
    end, and wait for the job members to stop on their own when idle."""
    tag = uuid.uuid4().hex[:6]
    env = dict(os.environ)
    stage = ["diagnose", "--bootstrap", settings.bootstrap, "--stage"]
    procs = [faultlens(f"node{i}", [*stage, "node", "--group", f"{prefix}n-{tag}", "--idle-stop", "15"], env, workdir)
             for i in range(2)]
    try:
        # The node stage has joined once its members said their first word downstream.
        wait_for_records(settings, topics.SUMMARIES, decode, "-", bool, timeout_s=120, progress=len)
        procs += [faultlens(f"job{i}", [*stage, "job", "--group", f"{prefix}j-{tag}", "--idle-stop",
                                        str(LIVE_JOB_IDLE_S)], env, workdir) for i in range(2)]
        replay_trace(settings, trace, speed=0, show_progress=False)
        nodes = procs[:2]
        committed_to_end(settings, f"{prefix}n-{tag}", topics.TELEMETRY_TOPICS,
                         running=lambda: any(p.popen.poll() is None for p in nodes),
                         progress=lambda: files_size(*(p.log_path for p in procs)), what="the node processes")
        for p in nodes:
            if p.popen.poll() is None:
                os.killpg(p.popen.pid, signal.SIGTERM)
        for p in procs:
            assert p.popen.wait(300) == 0, p.tail()
    finally:
        for p in procs:
            p.stop()


def run_two_and_two_backlog(settings, trace: Path, prefix: str) -> list:
    """Replay ``trace`` first, then let two node-stage and two job-stage members (groups
    ``<prefix>-node-*`` / ``<prefix>-job-*``) read it as a backlog to its end; the job members
    (start_members' tuples) are returned for what they held."""
    tag = uuid.uuid4().hex[:6]
    node_group = f"{prefix}-node-{tag}"
    replay_trace(settings, trace, speed=0, show_progress=False)
    nodes = start_members(settings, "node", 2, node_group, idle_s=6)
    wait_for_records(settings, topics.SUMMARIES, decode, "-", bool, timeout_s=60, progress=len)
    jobs = start_job_members(settings, 2, f"{prefix}-job-{tag}")
    finish_stages(settings, nodes, node_group, jobs)
    return jobs
