"""The agent's source threads: a stuck or crashing source never silences the others; heartbeats
say which source is in trouble. No broker here: the publisher spools, and the spool is read back."""

from __future__ import annotations

import dataclasses
import threading

import orjson

from faultlens.collectors.agent import Agent, AgentConfig
from faultlens.collectors.heartbeat import HeartbeatSource
from faultlens.collectors.nvml_sampler import NvmlUnavailable
from faultlens.collectors.spool import Spool
from faultlens.events.envelope import decode
from faultlens.streams.config import KafkaSettings
from tests.progress import wait_until


class Stuck:
    name = "stuck"

    def __init__(self):
        self.release = threading.Event()

    def run(self, stop):
        self.release.wait(30)  # ignores stop: a source wedged in a system call


class Crashing:
    name = "crashing"

    def __init__(self):
        self.calls = 0

    def run(self, stop):
        self.calls += 1
        raise RuntimeError(f"boom {self.calls}")


class Unavailable:
    name = "gpu-ish"

    def run(self, stop):
        raise NvmlUnavailable("NVML not available (no NVIDIA driver or GPU on this node)")


def _wait(predicate, agent, what: str, moving=lambda: 0):
    """``predicate()`` once it holds, waited for while the agent moves (its spool, its publisher's
    counters, and what the test names in ``moving``), not a fixed 20 s a busy machine outruns (issue 47)."""
    return wait_until(predicate, progress=lambda: (len(agent.spool), dataclasses.astuple(agent.publisher.stats), moving()),
                      stall_s=60, limit_s=240, what=what, poll_s=0.05, explain=lambda: str(agent.statuses()))


def test_heartbeat_event_counts_and_reads_statuses_fresh():
    out = []
    statuses = {"kernel": "ok"}
    hb = HeartbeatSource(job="j", node="n1", interval_s=1, publish=out.append, statuses=lambda: dict(statuses),
                         pids=lambda: [30, 10])
    hb.beat()
    statuses["kernel"] = "error: gone"
    hb.beat()
    assert [(e.source, e.kind, e.key) for e in out] == [("heartbeat", "beat", b"n1")] * 2
    assert [e.data["seq"] for e in out] == [0, 1]
    assert out[0].data["pids"] == [10, 30] and out[1].data["sources"] == {"kernel": "error: gone"}


def test_heartbeat_goes_on_when_process_discovery_fails():
    out = []

    def broken():
        raise PermissionError("no /proc")

    HeartbeatSource(job="j", node="n1", interval_s=1, publish=out.append, statuses=dict, pids=broken).beat()
    assert out[0].data["pids"] == []


def test_one_stuck_or_crashing_source_does_not_silence_the_others(tmp_path):
    config = AgentConfig(job="j", node="n1", heartbeat_interval_s=0.05, nvml=False, kernel=False, net=False,
                         spool_dir=tmp_path / "spool", create_topics=False)
    stuck, crashing = Stuck(), Crashing()
    # Port 1: nothing listens, so everything lands in the spool where the test can read it.
    agent = Agent(config, KafkaSettings(bootstrap="127.0.0.1:1"), extra_sources=[stuck, crashing, Unavailable()])
    for runner in agent._runners:
        runner.backoff_s = 0.05
    agent.start()
    try:
        assert _wait(lambda: crashing.calls >= 2, agent, "the crashing source's restart",
                     moving=lambda: crashing.calls)  # restarted after a failure
        assert _wait(lambda: len(agent.spool) >= 10, agent, "10 records spooled")
        statuses = agent.statuses()
    finally:
        stuck.release.set()
        agent.stop()
    assert statuses["stuck"] == "ok"
    assert statuses["crashing"].startswith("error: RuntimeError: boom")
    assert statuses["gpu-ish"].startswith("unavailable: NVML not available")
    assert statuses["stacks"].startswith("off: ")  # no verify key configured
    assert statuses["publisher"].startswith("broker unreachable, spooling")
    spool = Spool(tmp_path / "spool", 1 << 20)  # what the stopped agent left for its next run
    beats = [decode(r.value) for r in spool.peek(10_000)]
    assert beats and all(e.kind == "beat" for e in beats)
    seqs = [e.data["seq"] for e in beats]
    assert seqs == list(range(len(seqs)))  # spooled in order, none lost
    *running, stopping = [orjson.loads(r.value)["data"] for r in spool.peek(10_000)]
    last = running[-1]["sources"]
    assert last["gpu-ish"].startswith("unavailable") and last["heartbeat"] == "ok"
    # The stop's own last word: the node's silence from now on is this stop, not the machine.
    assert stopping["stopping"] is True and stopping["sources"]["heartbeat"] == "stopped"
    assert not any("stopping" in d for d in running)


def test_spool_left_by_a_stopped_agent_is_there_for_the_next_one(tmp_path):
    config = AgentConfig(job="j", node="n1", heartbeat_interval_s=0.05, nvml=False, kernel=False, net=False,
                         spool_dir=tmp_path / "spool", create_topics=False)
    agent = Agent(config, KafkaSettings(bootstrap="127.0.0.1:1")).start()
    assert _wait(lambda: len(agent.spool) >= 3, agent, "3 records spooled")
    agent.stop()
    waiting = len(agent.spool)
    again = Agent(config, KafkaSettings(bootstrap="127.0.0.1:1"))
    assert again.spool.stats.recovered == waiting
    assert [decode(r.value).data["seq"] for r in again.spool.peek(3)] == [0, 1, 2]
    again.spool.close()


def test_heartbeat_is_not_held_by_process_discovery_that_hangs_unresponsive():
    """Reading a wedged process's /proc can block: the beat goes out with the last pids known."""
    import threading as _t
    import time as _time

    from faultlens.collectors.heartbeat import HeartbeatSource

    gate, calls = _t.Event(), []

    def pids():
        calls.append(1)
        if len(calls) > 1:
            gate.wait(30)
        return [11, 12]

    out = []
    hb = HeartbeatSource(job="j", node="n1", interval_s=0.2, publish=out.append, statuses=dict, pids=pids,
                         health=lambda: {"blind": []})
    assert hb.beat().data["pids"] == [11, 12]
    t0 = _time.monotonic()
    second = hb.beat()
    hb.beat()  # a third beat: it must not wait on the stuck discovery either
    assert _time.monotonic() - t0 < 10.0  # the stuck discovery waits 30 s: loose for a loaded machine
    assert second.data["pids"] == [11, 12] and second.data["health"]["pids_stale"] is True
    assert len(calls) == 2  # the stuck discovery is not started again
    gate.set()


def test_heartbeat_beats_asked_from_two_threads_at_once_all_go_out():
    """The agent's beat loop and a caller asking for a beat now (a test, a stack request) may
    overlap: neither may raise, and every beat goes out with its own sequence number."""
    import threading as _t

    from faultlens.collectors.heartbeat import HeartbeatSource

    out, errors = [], []
    hb = HeartbeatSource(job="j", node="n1", interval_s=0.2, publish=out.append, statuses=dict,
                         pids=lambda: [11], health=lambda: {"blind": []})

    def beats():
        try:
            for _ in range(300):
                hb.beat()
        except Exception as e:  # noqa: BLE001 - the assertion below names it
            errors.append(repr(e))

    threads = [_t.Thread(target=beats) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(e.data["seq"] for e in out) == list(range(1200))


def test_a_beat_taken_while_the_agent_begins_to_stop_is_not_sent():
    """CI: the agent's stop set its stop event while the beat loop was in a beat; the kernel
    follower had already stopped, so that beat said "kernel: stopped" without ``stopping`` and
    diagnosis read a blind agent. A beat the stop overtook is dropped; the last beat says it."""
    out = []
    stop = threading.Event()
    statuses = {"kernel": "running"}

    def read_statuses():
        if len(out) == 2:  # the stop comes in while the third beat is being taken
            stop.set()
            statuses["kernel"] = "stopped"
        return dict(statuses)

    hb = HeartbeatSource(job="j", node="n1", interval_s=0.01, publish=out.append, statuses=read_statuses,
                         pids=lambda: [11])
    hb.run(stop)
    assert [e.data["sources"]["kernel"] for e in out] == ["running", "running"]
    last = hb.beat(stopping=True)
    assert last.data["stopping"] is True and last.data["seq"] == 2  # no gap in the sequence


def test_a_stopped_agents_last_beat_says_stopping_and_diagnosis_reads_no_blindness_in_it(tmp_path):
    """The stop sends one more beat, ``stopping``, whose sources have all stopped: diagnosis reads
    that as the stop, neither a blind agent nor, once it is quiet, a dead machine."""
    from faultlens.diagnosis.engine.offline import analyze

    kern = tmp_path / "kern.log"
    kern.write_text("")
    config = AgentConfig(job="j", node="n1", heartbeat_interval_s=0.05, nvml=False, kernel=True, kernel_log=str(kern),
                         net=False, spool_dir=tmp_path / "spool", create_topics=False)
    agent = Agent(config, KafkaSettings(bootstrap="127.0.0.1:1")).start()
    try:
        assert _wait(lambda: len(agent.spool) >= 5, agent, "5 records spooled")
    finally:
        agent.stop()
    beats = [e for e in (decode(r.value) for r in Spool(tmp_path / "spool", 1 << 20).peek(10_000)) if e.kind == "beat"]
    last = beats[-1].data
    assert last["stopping"] is True and last["sources"]["kernel"] == "stopped"
    assert [b["what"] for b in last["health"]["blind"]] == ["kernel"]  # what the agent sees as it goes
    assert [d for d in analyze(beats) if d.fault == "agent_blind"] == []
