import dataclasses
import time

import pytest

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.envelope import InvalidEvent
from tests.diagnosis.diag_events import JOB, T0, beat, ev, gpu, nodes, sample, step, topology, xid


def _engine() -> Engine:
    e = Engine(EngineConfig(implicit=False))
    e.process(topology(n=4, gpus=2))
    return e


def test_a_flood_of_one_xid_is_one_diagnosis_with_its_count():
    events = [topology(n=4, gpus=2)] + [xid(i * 0.01, "n002", 95, "gpu_memory", "evict_reset_gpu") for i in range(5000)]
    found = [d for d in analyze(events, Engine(EngineConfig(implicit=False))) if d.fault != "unknown"]
    assert len(found) == 1
    assert (found[0].fault, found[0].nodes, found[0].count, found[0].action) == ("gpu_memory", ("n002",), 5000, "evict_reset_gpu")


def test_raw_kernel_lines_are_parsed_on_the_way_in():
    e = _engine()
    line = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python3, GPU has fallen off the bus."
    out = e.process(ev(1, "n001", "kernel", "line", line=line))
    assert [(d.fault, d.action, d.nodes) for d in out] == [("gpu_lost", "evict", ("n001",))]


def test_garbage_lines_are_not_faults():
    e = _engine()
    for junk in ("", "\x00\x01\x02", "hello world", "NVRM: Xid (PCI:zz", "x" * 5000):
        assert e.process(ev(1, "n001", "kernel", "line", line=junk)) == []


@pytest.mark.parametrize("make,field", [
    (lambda: ev(1, "n001", "kernel", "frobnicate"), "kind"),
    (lambda: ev(1, "n001", "kernel", "xid", pci="0000:3b:00"), "data.xid"),
    (lambda: ev(1, "n001", "gpu", "sample", gpus={"not": "a list"}), "data.gpus"),
    (lambda: ev(1, "n001", "kernel", "line", line=42), "data.line"),
    (lambda: ev(1, "-", "job", "topology", tp=2), "data.pp"),
])
def test_bad_input_is_a_dead_letter_naming_the_field(make, field):
    e = _engine()
    with pytest.raises(InvalidEvent) as info:
        e.process(make())
    assert info.value.field == field


def test_a_late_fault_is_still_diagnosed_and_marked_late():
    e = _engine()
    e.process(beat(2000, "n001"))
    [late] = e.process(xid(10, "n001", 79, "gpu_lost", "evict"))
    assert (late.fault, late.nodes, late.action) == ("gpu_lost", ("n001",), "evict")
    assert late.detail.startswith("late by 1990s") and late.onset == T0 + 10
    assert e.stats["late_faults"] == 1
    assert e.process(xid(1990, "n002", 79, "gpu_lost", "evict"))[0].fault == "gpu_lost"  # small disorder is fine


def test_a_late_sample_is_counted_not_judged_and_not_a_dead_letter():
    e = _engine()
    for t in range(0, 2000, 10):
        for n in nodes(4):
            e.process(beat(t, n))
    assert e.process(beat(100, "n003")) == []  # 1,890 s late: would look like a silence if judged
    assert e.stats["late"] == 1
    later = [d for t in range(2000, 2060, 10) for n in nodes(4) for d in e.process(beat(t, n))]
    assert not [d for d in later if d.fault == "node_silent"]


def test_redelivered_events_are_processed_once():
    e = _engine()
    x = xid(1, "n003", 79, "gpu_lost", "evict")
    assert len(e.process(x)) == 1
    assert e.process(x) == [] and e.stats["duplicates"] == 1


def test_a_dead_letter_redelivered_is_dropped_and_a_good_event_with_its_id_is_not():
    e = _engine()
    bad = ev(1, "n003", "gpu", "no_such_kind")
    with pytest.raises(InvalidEvent):
        e.process(bad)
    assert e.process(bad) == [] and e.stats["duplicates"] == 1  # at-least-once: one dead letter
    good = dataclasses.replace(xid(2, "n003", 79, "gpu_lost", "evict"), id=bad.id)
    assert [d.fault for d in e.process(good)] == ["gpu_lost"]  # never lost for sharing the id


def test_rank_on_the_wrong_node_is_reported_not_lost():
    e = _engine()
    out = e.process(ev(5, "n003", "nccl", "cuda_error", rank=0, error="an illegal memory access was encountered"))
    out += e.flush()  # a CUDA error is held a moment for a hardware cause logged beside it
    faults = sorted((d.fault, d.action) for d in out)
    assert faults == [("cuda_error", "stop_time_diagnosis"), ("unknown", "none")]
    unknown = next(d for d in out if d.fault == "unknown")
    assert "rank 0 reported from n003 but the topology has it on node n000" in unknown.detail


def test_without_topology_node_local_rules_still_work():
    e = Engine(EngineConfig(implicit=False))
    out = e.process(ev(5, "n003", "nccl", "cuda_error", rank=6, error="CUDA error: unspecified launch failure"))
    out += e.flush()
    assert {d.fault for d in out} == {"cuda_error", "unknown"}
    assert "no topology" in next(d for d in out if d.fault == "unknown").detail


def test_silence_is_judged_on_event_time():
    e = _engine()
    found = []
    for t in range(0, 120, 5):
        for n in nodes(4):
            if n != "n002" or t < 30:
                found += e.process(beat(t, n))
    silent = [d for d in found if d.fault == "node_silent"]
    assert [(d.nodes, d.action) for d in silent] == [(("n002",), "evict")]
    assert silent[0].onset == T0 + 25


def test_wall_clock_moves_event_time_only_after_the_grace_period():
    e = Engine(EngineConfig(implicit=False, grace_s=30))
    e.process(topology(n=8, gpus=1, tp=1, pp=1))
    for t in range(0, 60, 5):
        for n in nodes(8):
            if n != "n005" or t < 20:
                e.process(beat(t, n))
    now = e.job_time(JOB)
    assert e.tick(time.time()) == [] and e.job_time(JOB) == now  # events just arrived: an old trace is not silent
    e.tick(time.time() + 45)  # 45 s of wall time without any event
    assert e.job_time(JOB) == pytest.approx(now + 15, abs=0.5)


def test_the_wall_clock_leaves_a_job_alone_while_the_consumer_still_holds_its_records():
    e = Engine(EngineConfig(implicit=False, grace_s=30))
    e.process(topology(n=4, gpus=1, tp=1, pp=1))
    for t in range(0, 20, 5):
        for n in nodes(4):
            e.process(beat(t, n))
    now = e.job_time(JOB)
    e.tick(time.time() + 45, busy={JOB})  # its next records are on their way: they move its time
    assert e.job_time(JOB) == now
    e.tick(time.time() + 45, busy={"another-job"})
    assert e.job_time(JOB) == pytest.approx(now + 15, abs=0.5)


def test_jobs_keep_their_own_time():
    # A replayed old trace beside a live job: the live job's time never makes the old one silent.
    e = Engine(EngineConfig(implicit=False))
    e.process(topology(n=4, gpus=1, tp=1, pp=1))
    e.process(topology(n=4, gpus=1, tp=1, pp=1, job="live"))
    found = []
    for t in range(0, 600, 5):
        for n in nodes(4):
            found += e.process(beat(t + 100_000, n, job="live"))
            if t < 60:
                found += e.process(beat(t, n))
    assert not [d for d in found if d.fault == "node_silent"]
    assert e.job_time(JOB) == T0 + 55 and e.job_time("live") == T0 + 100_595


def test_user_code_error_never_evicts_even_when_it_repeats():
    e = _engine()
    out = []
    for i in range(3):
        out += e.process(ev(100 * i, "n001", "nccl", "exception", rank=2, type="ValueError", message="bad shape",
                            file="model.py", func="forward", lineno=12, user_code=True, fault="user_code", action="rollback"))
        e.process(ev(100 * i + 50, "-", "job", "restart", reason="rollback", command_id="c", nodes_out=[], nodes_in=[]))
    assert [d.action for d in out if d.fault == "user_code"] == ["rollback"] * 3


def test_nan_from_data_does_not_evict():
    e = _engine()
    out = []
    for i in range(20):
        for r in range(8):
            out += e.process(step(i * 10, f"n{r // 2:03d}", r, i, loss=2.0 if i < 15 else "nan"))
    assert {(d.fault, d.action) for d in out} == {("nan_loss", "stop_time_diagnosis")}


def test_healthy_samples_and_steps_give_nothing():
    e = _engine()
    out = []
    for t in range(0, 300):
        for i, n in enumerate(nodes(4)):
            out += e.process(sample(t, n))
            if t % 10 == 0:
                out += e.process(step(t, n, 2 * i, t // 10))
                out += e.process(step(t, n, 2 * i + 1, t // 10))
            if t % 5 == 0:
                out += e.process(beat(t, n))
    assert out + e.flush() == []
    assert e.stats["events"] == 300 * 4 + 30 * 8 + 60 * 4 + 1


def test_contained_memory_error_is_the_memory_when_the_counters_confirm_it():
    e = _engine()
    out = e.process(xid(100, "n001", 94, "app_fault", "reattempt"))
    out += e.process(sample(99, "n001"))
    out += e.process(sample(109, "n001", [gpu(0, ecc_dbe_volatile=2), gpu(1)]))
    for t in range(110, 140, 5):
        out += e.process(beat(t, "n001"))
    assert [(d.fault, d.nodes) for d in out] == [("gpu_memory", ("n001",))]


def test_contained_memory_error_alone_is_an_application_fault():
    e = _engine()
    out = e.process(xid(100, "n001", 94, "app_fault", "reattempt"))
    for t in range(100, 140, 5):
        out += e.process(sample(t, "n001"))
    assert [(d.fault, d.action) for d in out] == [("app_fault", "reattempt")]
    assert 25 <= out[0].ts - out[0].onset <= 30  # decided after the hold, onset at the Xid


def test_lateness_is_judged_per_job():
    """A job far behind another (a replayed trace beside a live job) is not 'too late'; a job's
    own straggler event is."""
    from faultlens.diagnosis.engine.core import Engine
    from faultlens.events.envelope import Envelope

    engine = Engine()

    def beat(job, ts):
        return Envelope(ts=ts, job=job, node="n0", source="heartbeat", kind="beat", data={"seq": 1, "pids": [1]})

    engine.process(beat("live", 1_795_000_000.0))
    engine.process(beat("replayed", 1_767_225_600.0))  # a year behind the live job: its own clock
    engine.process(beat("replayed", 1_767_225_700.0))
    assert engine.stats["late"] == 0
    assert engine.process(beat("replayed", 1_767_225_700.0 - 3600)) == []  # its own straggler: late
    assert engine.stats["late"] == 1
