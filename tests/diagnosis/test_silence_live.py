"""A live job read by split stages whose node-stage members are SIGKILLed (issue 32): one, then the
other, and none restarted for two minutes; a node really dies during the outage; then the job ends
with every node stopping at once. No healthy machine is evicted, the dead one is, the acting
diagnoses are `faultlens analyze`'s, and the outage is named as the pipeline's.

Every step waits for what it needs, never for a fixed wall time (issue 47): the trace is replayed
at SPEED x its event time and each kill and restart comes at a point of the replay's event time
(the second kill once the other member has taken the first one's partitions over); after the end,
the job stage's wall clock moves the quiet job's time WALL_RATE x (EngineConfig.wall_rate) until
as much event time has passed as the test judged before (40 s): 25 wall seconds instead of 45.
The two minutes of outage are event time: they are replayed at OUTAGE_SPEED, as fast as still
leaves the job stage twice its writer_ttl_s of wall time with no node-stage word (what makes it
judge the outage the pipeline's), 30 wall seconds instead of 60; the restart and the end at SPEED."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid

import pytest

from bench.testbed import foreign
from faultlens.demo.processes import faultlens
from faultlens.diagnosis.edge.consumer import diagnose_consumer
from faultlens.diagnosis.engine.core import EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.replay.scoring import EVICTING
from faultlens.events import topics
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import decode
from faultlens.events.event_time import WatermarkMerge
from faultlens.events.trace import write_trace
from faultlens.streams.producer import Producer
from faultlens.streams.replay import publish_messages, trace_message_batches
from tests.diagnosis.sim_replay import acting
from tests.kafka_fixtures import job_records, wait_for_records
from tests.progress import wait_until

pytestmark = [pytest.mark.broker, pytest.mark.e2e]

SPEED = 2.0  # event seconds replayed per wall second
OUTAGE_S = 120.0  # event seconds without any node-stage member
# The outage's pace: the job stage takes its upstream for gone after writer_ttl_s (15 s) of wall
# time without a word; twice that passes before the restart.
OUTAGE_SPEED = OUTAGE_S / (2 * WatermarkMerge().writer_ttl_s)
END_S = 170.0  # every stream of the job ends here (the fixture's comment)
AFTER_END_S = 40.0  # event time the job stage judges past the end
WALL_RATE = 4.0
STALL_S = 60.0  # no progress for this long fails a wait


class Replay:
    """The trace published at ``speed`` in a thread (:meth:`pace` changes it); ``reached``: the
    event time (seconds from the trace's start) of the last message handed to the producer."""

    def __init__(self, settings, path, speed: float) -> None:
        self.reached = float("-inf")
        self.error: BaseException | None = None
        # (step, event second reached, wall second): what a failure shows of how the run went
        self.timeline: list[tuple[str, float, float]] = []
        self.started = time.monotonic()
        self._args = (settings, path)
        # (wall second, event second, speed): a message of event second t goes out at wall second
        # wall + (t - event) / speed; one tuple, replaced whole, as the replay thread reads it
        self._pace: tuple[float, float | None, float] = (0.0, None, speed)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def pace(self, speed: float) -> None:
        """From now on, ``speed`` event seconds a wall second, on from what went out last."""
        self._pace = (time.monotonic(), self.reached, speed)

    def _messages(self, path):
        for batch in trace_message_batches(path):
            for m in batch.messages():
                at = m.ts - foreign.T0
                wall, event, speed = self._pace
                if event is None or event == float("-inf"):  # the first message sets the clock
                    self._pace = wall, event, speed = time.monotonic(), at, speed
                if (wait := wall + (at - event) / speed - time.monotonic()) > 0:
                    time.sleep(wait)
                yield m
                self.reached = at  # asked for the next one: this one went out

    def _run(self) -> None:
        settings, path = self._args
        try:
            publish_messages(settings, self._messages(path))  # paced above
        except BaseException as exc:  # noqa: BLE001 - the test's wait reports it
            self.error = exc
        self.reached = float("inf")

    def at(self, second: float, what: str) -> float:
        """Wait until the replay reached ``second`` of event time (or ended); the time reached."""
        wait_until(lambda: self.reached >= second or self.error, progress=lambda: self.reached,
                   stall_s=STALL_S, what=f"the replay to reach {second:.0f} s ({what})")
        assert self.error is None, self.error
        self.timeline.append((what, round(self.reached, 1), round(time.monotonic() - self.started, 1)))
        return self.reached


def node_words(settings, members: int, *, reading_all: str | None = None) -> list:
    """The node-stage members' announcements on `summaries` once ``members`` of them read disjoint
    shares of the telemetry partitions, every one covered (or, with ``reading_all``, once the
    member whose id starts with it reads them all)."""
    def latest(words) -> dict[str, dict]:
        return {w.data["member"]: w.data for w in words if w.data.get("reads") is not None}

    def ready(words) -> bool:
        last = latest(words)
        if reading_all is not None:
            return any(m.startswith(reading_all) and len(d["reads"]) == d["of"] for m, d in last.items())
        shares = [set(d["reads"]) for d in last.values() if d["reads"]]
        return (len(shares) == members and sum(map(len, shares)) == len(set().union(*shares))
                == next(iter(last.values()))["of"])

    # A wait that moves while the members' shares change (joins, a rebalance), not on their
    # keep-alive words, which say the same every few seconds.
    words = wait_for_records(settings, topics.SUMMARIES, decode, "-", ready, timeout_s=STALL_S,
                             progress=lambda ws: frozenset((m, tuple(d["reads"])) for m, d in latest(ws).items()))
    assert ready(words), f"node-stage members never read as expected: {sorted(latest(words).items())}"
    return words


@pytest.mark.long(120)
@pytest.mark.timeout(900)
def test_e2e_node_stage_members_killed_for_two_minutes_evict_no_healthy_machine(own_kafka_settings, tmp_path):
    settings = own_kafka_settings
    case = foreign.load("node_dies_16_phased")
    offline = analyze(case.events)
    assert [(d.fault, d.action, d.nodes) for d in offline if d.action in EVICTING] == [
        ("node_silent", "evict", ("h100-06",))]
    path = tmp_path / "live.parquet"
    write_trace(path, case.events)

    tag = uuid.uuid4().hex[:6]
    runner, handler = diagnose_consumer(settings, EngineConfig(grace_s=5.0, wall_rate=WALL_RATE), stage="job",
                                        group=f"live-job-{tag}")
    job_thread = threading.Thread(target=runner.run, kwargs={"handle_signals": False}, daemon=True)
    job_thread.start()
    argv = ["diagnose", "--stage", "node", "--bootstrap", settings.bootstrap, "--group", f"live-node-{tag}"]
    env = dict(os.environ)
    procs = [faultlens(f"node{i}", argv, env, tmp_path) for i in range(2)]
    replay = Replay(settings, path, SPEED)
    try:
        node_words(settings, 2)  # both joined, each reading its share
        replay.started = time.monotonic()
        replay.thread.start()
        replay.at(15, "the first kill")
        os.killpg(procs[0].popen.pid, signal.SIGKILL)
        node_words(settings, 1, reading_all=f"{socket.gethostname()}-{procs[1].popen.pid}-")  # took it over
        replay.timeline.append(("the takeover", round(replay.reached, 1), round(time.monotonic() - replay.started, 1)))
        killed_at = replay.at(30, "the second kill")
        os.killpg(procs[1].popen.pid, signal.SIGKILL)  # no node stage at all: h100-06 dies at 60 s
        replay.pace(OUTAGE_SPEED)
        replay.at(killed_at + OUTAGE_S, "the node stage's restart")  # (or the end, if the takeover was late)
        procs.append(faultlens("node-again", argv, env, tmp_path))
        replay.pace(SPEED)
        replay.at(float("inf"), "its end")

        # The job ended at 170 s: the job stage's wall clock moves its time on, as far as before.
        def job_time() -> float:
            return (handler.engine.job_time(case.job) or float("-inf")) - foreign.T0

        wait_until(lambda: job_time() >= END_S + AFTER_END_S, progress=lambda: (job_time(), runner.stats.records_in),
                   stall_s=STALL_S, what=f"the job stage's time to pass {END_S + AFTER_END_S:.0f} s",
                   explain=lambda: "\n".join(p.tail(1500) for p in procs))
    finally:
        for p in procs:
            p.stop()
    with Producer(settings) as producer:
        runner.stop()
        job_thread.join(60)
        producer.send_all(handler.flush())
        producer.flush()

    live = job_records(settings, "diagnoses", Diagnosis.decode, case.job, idle_s=1.5)
    shown = [(d.fault, d.action, d.nodes, round(d.ts - foreign.T0), d.detail[:100]) for d in live] + replay.timeline
    assert acting(live) == acting(offline), shown
    assert {n for d in live if d.action in EVICTING for n in d.nodes} == {"h100-06"}, shown
    lost = [d for d in live if d.fault == "telemetry_lost"]
    assert any("no node-stage member has announced progress" in d.detail for d in lost), shown
    assert any("no node of the job reported" in d.detail for d in lost), shown
