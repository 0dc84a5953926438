"""NVML calls under a deadline (unit tests with a fake NVML module whose call blocks for good)."""

from __future__ import annotations

import threading
import time

import pytest

from bench.testbed.fake_nvml import HangingNvml
from faultlens.collectors.nvml_deadline import CallTimeout, DeadlineCalls
from faultlens.collectors.nvml_sampler import NvmlReader, NvmlSampler, NvmlStuck
from faultlens.diagnosis.rules.agent_health import GpuUnresponsiveRule
from tests.progress import Watched, wait_until


def _sampler(nvml, out, deadline_s=0.3, interval_s=0.2):
    return NvmlSampler(job="j", node="n1", interval_s=interval_s, publish=out.append, nvml=nvml,
                       xid_events=False, deadline_s=deadline_s)


def test_a_call_past_its_deadline_is_given_up_and_named():
    calls = DeadlineCalls(0.2)
    block = threading.Event()

    def stuck():
        from faultlens.collectors.nvml_deadline import note_call
        note_call("nvmlDeviceGetTotalEccErrors")
        block.wait()

    t0 = time.monotonic()
    with pytest.raises(CallTimeout) as err:
        calls.run(3, stuck)
    # Given up at its deadline, not when the call returns (never): the bound is loose for a loaded machine.
    assert 0.2 <= time.monotonic() - t0 < 10.0
    assert err.value.stuck.call == "nvmlDeviceGetTotalEccErrors" and calls.is_stuck(3)
    assert calls.run(4, lambda: 42) == 42  # other keys go on
    block.set()
    for _ in range(100):
        if not calls.is_stuck(3):
            break
        time.sleep(0.01)
    assert not calls.is_stuck(3) and calls.run(3, lambda: "again") == "again"


def test_a_gpu_whose_call_blocks_for_good_is_unresponsive_and_the_others_are_sampled_on():
    nvml = HangingNvml(n=3)
    out = []
    sampler = _sampler(nvml, out)
    reader = NvmlReader(nvml)
    t0 = time.monotonic()
    events = sampler.sample_once(reader)
    took = time.monotonic() - t0
    # The deadline the sampler enforces is the behaviour under test (it must not add up per call),
    # so this wall bound stays (issue 47); it held in three runs of tests/stress.sh.
    assert took < 0.3 + 0.2 + 0.5  # the deadline, the handle probe, slack: never the hang
    kinds = [(e.kind, e.data.get("gpu")) for e in events]
    assert ("unresponsive", 1) in kinds
    sample = next(e for e in events if e.kind == "sample")
    assert [g["index"] for g in sample.data["gpus"]] == [0, 2]
    unresp = next(e for e in events if e.kind == "unresponsive")
    assert unresp.data["call"] == "nvmlDeviceGetTemperature" and unresp.data["handle"] == "answers"
    assert unresp.data["others_answered"] == 2 and unresp.data["fault"] == "gpu_reset_required"
    # Next samples skip the stuck GPU at once: no second wait, no second event.
    t0 = time.monotonic()
    again = sampler.sample_once(reader)
    assert time.monotonic() - t0 < 0.2
    assert [e.kind for e in again] == ["sample"]
    health = sampler.health()
    assert health["unresponsive"]["1"]["call"] == "nvmlDeviceGetTemperature"
    # The call comes back: one `responsive` event, and GPU 1 is sampled again.
    nvml.release.set()
    for _ in range(100):
        if any(e.kind == "responsive" for e in out):
            break
        time.sleep(0.01)
    back = next(e for e in out if e.kind == "responsive")
    assert back.data["gpu"] == 1 and back.data["call"] == "nvmlDeviceGetTemperature"
    later = sampler.sample_once(reader)
    assert [g["index"] for g in later[0].data["gpus"]] == [0, 1, 2]
    assert sampler.health()["unresponsive"] == {}


def test_an_unresponsive_gpu_whose_handle_is_gone_is_lost():
    nvml = HangingNvml(n=2, handle_lost=True)
    events = _sampler(nvml, []).sample_once(NvmlReader(nvml))
    unresp = next(e for e in events if e.kind == "unresponsive")
    assert unresp.data["handle"] == "lost" and unresp.data["fault"] == "gpu_lost"
    finding = GpuUnresponsiveRule().observe(unresp)[0]
    assert (finding.fault, finding.action, finding.evidence) == ("gpu_lost", "evict", (unresp.id,))
    nvml.release.set()


def test_the_rule_turns_an_unresponsive_gpu_into_a_reset_quoting_the_call():
    nvml = HangingNvml(n=2)
    unresp = next(e for e in _sampler(nvml, []).sample_once(NvmlReader(nvml)) if e.kind == "unresponsive")
    finding = GpuUnresponsiveRule().observe(unresp)[0]
    assert (finding.fault, finding.action, finding.entity) == ("gpu_reset_required", "evict_reset_gpu", "gpu:1")
    assert "nvmlDeviceGetTemperature" in finding.detail and "GPU-0001" in finding.detail
    assert "1 other GPU(s) of the node answered" in finding.detail and finding.evidence == (unresp.id,)
    nvml.release.set()


def test_nvml_init_that_never_returns_is_a_stuck_source_not_a_hung_agent():
    nvml = HangingNvml(hang_call="nvmlInit")
    sampler = NvmlSampler(job="j", node="n1", interval_s=0.2, publish=[].append, nvml=nvml, xid_events=False,
                          deadline_s=0.1, init_deadline_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(NvmlStuck, match="nvmlInit did not return within 0.3s"):
        sampler.run(threading.Event())
    assert time.monotonic() - t0 < 10.0  # nvmlInit never returns: any bound tells; loose for a loaded machine
    with pytest.raises(NvmlStuck, match="has not returned"):  # a restart does not pile up threads
        sampler.run(threading.Event())
    assert sampler.calls.abandoned == 1
    nvml.release.set()


def test_nvml_unresponsive_at_start_leaves_the_agent_beating_and_diagnosis_alerts_it_is_blind(tmp_path):
    """nvmlInit never returns: the agent beats on, its beats name NVML as what it cannot see, and
    diagnosis makes that one `agent_blind` alert, never an eviction."""
    from faultlens.collectors.agent import Agent, AgentConfig
    from faultlens.diagnosis.engine.offline import analyze
    from faultlens.streams.config import KafkaSettings

    nvml = HangingNvml(hang_call="nvmlInit")
    config = AgentConfig(job="j-blind", node="n7", heartbeat_interval_s=0.05, nvml=True, net=False, kernel=False,
                         nvml_deadline_s=0.1, nvml_init_deadline_s=0.2, spool_dir=tmp_path / "spool", create_topics=False)
    agent = Agent(config, KafkaSettings(bootstrap="127.0.0.1:1"), nvml_module=nvml).start()
    try:
        # Until a beat names NVML blind (its nvmlInit past the 0.2 s deadline): waited for while the
        # agent's sources change state, not a fixed 0.6 s a loaded machine's thread start outruns.
        heartbeat = agent.source("heartbeat")
        wait_until(lambda: heartbeat.beat().data["health"]["blind"], progress=agent.statuses, stall_s=60,
                   limit_s=240, what="a beat naming NVML blind", explain=lambda: str(agent.statuses()))
        beats = [heartbeat.beat() for _ in range(3)]
    finally:
        agent.stop(timeout=2)
        nvml.release.set()
    blind = beats[-1].data["health"]["blind"]
    assert [b["what"] for b in blind] == ["nvml"] and "nvmlInit has not returned" in blind[0]["why"]
    diagnoses = analyze(beats)
    assert [(d.fault, d.action, d.nodes) for d in diagnoses] == [("agent_blind", "alert", ("n7",))]
    assert "nvml" in diagnoses[0].detail and beats[0].id in diagnoses[0].evidence


def test_blind_spots_name_a_stalled_follower_and_a_node_wide_stuck_call():
    from faultlens.collectors.agent_health import blind_spots

    health = {"nvml": {"state": "ok", "lag_s": 0.1, "deadline_s": 10.0,
                       "unresponsive": {"node": {"call": "nvmlDeviceGetCount", "for_s": 42.0}}},
              "followers": {"kernel": {"poll_age_s": 45.0}, "trainer": {"poll_age_s": 0.1}},
              "spool": {"writable": True}}
    spots = blind_spots(health, {"nvml": "ok", "kernel": "ok", "trainer": "ok"}, interval_s=1.0)
    assert [(s.what, s.why.split(" ")[0]) for s in spots] == [("nvml", "NVML's"), ("kernel", "the")]
    assert "nvmlDeviceGetCount" in spots[0].why and "45s" in spots[1].why
    # One GPU stuck is not blindness (it is its own gpu_reset_required), nor is a lag of a few intervals.
    health["nvml"]["unresponsive"] = {"3": {"call": "nvmlDeviceGetTemperature", "for_s": 60.0}}
    health["followers"]["kernel"]["poll_age_s"] = 0.2
    assert blind_spots(health, {"nvml": "ok", "kernel": "ok"}, interval_s=1.0) == []


def test_blind_spots_forget_a_source_that_failed_once_and_runs_again():
    from faultlens.collectors.agent_health import blind_spots

    health = {"nvml": {"state": "ok", "lag_s": 0.0, "unresponsive": {}}, "followers": {"kernel": {"poll_age_s": 0.1}}}
    again = "error: OSError: boom (1 failure(s), restarted)"
    assert blind_spots(health, {"nvml": again, "kernel": again}, interval_s=1.0) == []
    down = {"nvml": "error: RuntimeError: boom", "kernel": "error: OSError: no /dev/kmsg"}
    health["nvml"]["state"] = "starting"
    assert [s.what for s in blind_spots(health, down, interval_s=1.0)] == ["nvml", "kernel"]


_PAUSED_AGENT = r"""
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
from faultlens.collectors.nvml_sampler import NvmlReader, NvmlSampler
from bench.testbed.fake_nvml import FakeNvml

class Slow(FakeNvml):
    def nvmlDeviceGetTemperature(self, h, sensor):
        for _ in range(8):  # slow (0.4 s of running time) but within the 1 s deadline
            time.sleep(0.05)
        return super().nvmlDeviceGetTemperature(h, sensor)

nvml = Slow(n=2)
sampler = NvmlSampler(job="j", node="n", interval_s=0.1, publish=lambda e: None, nvml=nvml, xid_events=False,
                      deadline_s=1.0)
reader = NvmlReader(nvml)
print("ready", flush=True)
kinds, rounds = [], 0
end = time.monotonic() + 4.0
while time.monotonic() < end or rounds < 4:  # 4 s, and rounds enough however slow the machine
    kinds += [e.kind for e in sampler.sample_once(reader)]
    rounds += 1
print(json.dumps(kinds), flush=True)
"""


def test_a_paused_agent_is_not_a_wedged_gpu_unresponsive(tmp_path):
    """SIGSTOP the sampling process for 2.5 s (a paused VM, a frozen cgroup) in the middle of its
    calls: the deadline of 1 s is not blown by time nobody ran."""
    import json
    import signal
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    # Its start and its end waited for while it computes (tests/progress.py), not 30 s (issue 47);
    # the 0.7 s and the 2.5 s below are the scenario (a pause in the middle of its calls), no wait.
    with Watched([sys.executable, "-c", _PAUSED_AGENT, root], cpu=True) as proc:
        proc.wait_line(lambda line: line == "ready", stall_s=60, limit_s=240)
        time.sleep(0.7)
        proc.popen.send_signal(signal.SIGSTOP)
        time.sleep(2.5)
        proc.popen.send_signal(signal.SIGCONT)
        done = proc.wait_exit(stall_s=60, limit_s=240)
    assert done.returncode == 0, done.stderr[-2000:]
    kinds = json.loads(done.stdout.strip().splitlines()[-1])
    assert "unresponsive" not in kinds and kinds.count("sample") >= 3
