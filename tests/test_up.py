"""`faultlens up` as a real process on the test broker: one simulated fault per job goes in, a
diagnosis comes out for each, a signed evict only for the job remediation acts on, history rows
after SIGTERM, and a metrics endpoint serving the runners' counters."""

from __future__ import annotations

import os
import time
import urllib.request
import uuid

import pytest

from faultlens.demo import processes as pipeline
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.signing import load_verify_keys, write_key_pair
from faultlens.history.schema import open_history
from faultlens.simulator import FaultPlan, SimConfig, simulate
from faultlens.streams.broker import free_port
from faultlens.streams.replay import publish
from tests.kafka_fixtures import job_records
from tests.progress import files_size, procs_progress, stop_proc, wait_until

# Waits end when what they wait for comes, or fail when `faultlens up` neither printed, logged (at
# INFO) nor wrote (its history) anything for STALL_S: never at a fixed time a loaded machine outruns.
pytestmark = [pytest.mark.broker]
STALL_S = 60.0


def _metric(body: str, name: str, consumer: str) -> float | None:
    for line in body.splitlines():
        if line.startswith(f'{name}{{consumer="{consumer}"}}'):
            return float(line.split()[-1])
    return None


def _decoded(settings, topic, decoder, job):
    return job_records(settings, topic, decoder, job, idle_s=0.3)


def _trace(job: str):
    # Recent event times: the engine's clock is the newest event on the shared topics, and a trace
    # from January would be "too late" next to other tests' wall-clock events.
    config = SimConfig(nodes=4, gpus=2, job=job, seed=3, start_ts=time.time() - 240, noise=False)
    return simulate(config, FaultPlan().fail_at("gpu_lost", node="n001", t=130), duration=200)


def test_up_diagnoses_acts_only_where_told_stores_history_and_serves_metrics(kafka_settings, tmp_path):
    tag = uuid.uuid4().hex[:8]
    observed, acted = f"up-obs-{tag}", f"up-act-{tag}"
    db = tmp_path / "history.duckdb"
    port = free_port()
    private, public = write_key_pair(tmp_path / "keys")
    env = {**os.environ, "FAULTLENS_SIGNING_KEY": str(private), "FAULTLENS_HOME": str(tmp_path / "home"),
           "FAULTLENS_LOG_LEVEL": "INFO"}
    up = pipeline.faultlens("up", ["up", "--bootstrap", kafka_settings.bootstrap, "--db", str(db), "--act-on", acted,
                                   "--group-suffix", tag, "--metrics-port", str(port), "--grace", "5"], env, tmp_path)

    def until(condition, what: str, poll_s: float = 0.2):
        return wait_until(condition, progress=lambda: (procs_progress([up]), files_size(tmp_path)), stall_s=STALL_S,
                          what=what, explain=up.tail, poll_s=poll_s)

    try:
        ready = until(lambda: up.find(lambda line: line.get("event") == "ready"), "up's ready line")
        assert ready, up.tail()
        assert ready[0]["consumers"] == ["diagnose", "remediate", "history"] and ready[0]["db"] == str(db)
        keys = load_verify_keys([public])
        assert ready[0]["signing_key_id"] == keys.ids[0] and ready[0]["signing_key"] == str(private)

        runs = {job: _trace(job) for job in (observed, acted)}
        for run in runs.values():
            publish(kafka_settings, run.events(), speed=0)

        def diagnosed():
            found = {job: [d for d in _decoded(kafka_settings, "diagnoses", Diagnosis.decode, job) if d.fault == "gpu_lost"]
                     for job in runs}
            return found if all(found.values()) else None

        found = until(diagnosed, "a gpu_lost diagnosis of each job", poll_s=1.0)
        assert found, up.tail()
        for ds in found.values():
            assert "n001" in ds[0].nodes and ds[0].action == "evict"

        evicts = until(lambda: [c for c in _decoded(kafka_settings, "commands", Command.decode, acted)
                                if c.action == "evict"], "the acted job's evict", poll_s=1.0)
        assert evicts, up.tail()
        assert evicts[0].verify(keys) and evicts[0].nodes == ("n001",)
        # read again: under load a second gpu_lost record of the job may land after the first read
        every = _decoded(kafka_settings, "diagnoses", Diagnosis.decode, acted)
        lost = {d.id for d in every if d.fault == "gpu_lost"}
        assert evicts[0].diagnosis_id in lost, [(d.id, d.fault, d.action, d.nodes, d.detail[:120]) for d in every]
        # observe-only for the other job: decided, never sent
        assert _decoded(kafka_settings, "commands", Command.decode, observed) == []

        def scrape() -> str:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()

        body = scrape()
        events_in = [line for line in body.splitlines() if line.startswith("faultlens_events_in")]
        assert {'consumer="diagnose"', 'consumer="remediate"', 'consumer="history"'} <= {
            line[line.index("{") + 1:line.index("}")] for line in events_in}
        assert any(float(line.split()[-1]) > 0 for line in events_in if 'consumer="diagnose"' in line)
        # History has caught up with our diagnoses and the evict before we stop (the report reads
        # it after exit): its consumer has no lag at the end of a loop that began after they were
        # on the topics. The loop in progress at this scrape may have begun before; the one after it
        # did not (each loop's duration, to the microsecond, tells one loop from the next).
        loops = [_metric(body, "faultlens_loop_seconds", "history")]

        def history_caught_up() -> bool:
            now = scrape()
            if (last := _metric(now, "faultlens_loop_seconds", "history")) != loops[-1]:
                loops.append(last)
            return len(loops) >= 3 and _metric(now, "faultlens_consumer_lag", "history") == 0

        until(history_caught_up, "the history consumer's lag to reach 0", poll_s=0.5)
    finally:
        # A clean stop writes the history first: waited for while it moves (prints, logs,
        # writes), not 180 s (issue 47).
        rc = stop_proc(up)
    assert rc == 0, up.tail()
    stopped = up.find(lambda line: line.get("event") == "stopped")
    assert stopped and stopped[0]["consumers"]["diagnose"]["records"] > 0, up.tail()
    assert stopped[0]["consumers"]["remediate"]["commands_sent"] >= 1

    conn = open_history(db)
    try:
        for job in runs:
            [(n_diag,)] = conn.execute("SELECT count(*) FROM diagnoses WHERE job = ? AND fault = 'gpu_lost'", [job]).fetchall()
            [(n_events,)] = conn.execute("SELECT count(*) FROM events WHERE job = ?", [job]).fetchall()
            assert n_diag >= 1 and n_events > 0
        [(n_cmd,)] = conn.execute("SELECT count(*) FROM commands WHERE job = ? AND action = 'evict'", [acted]).fetchall()
        assert n_cmd >= 1
    finally:
        conn.close()


def test_up_without_a_key_makes_an_ephemeral_pair_and_says_where_its_public_half_is(tmp_path, monkeypatch, caplog):
    import argparse

    from faultlens.commands.up import _signing_key
    from faultlens.events.home import EPHEMERAL_VERIFY_KEY

    monkeypatch.setenv("FAULTLENS_HOME", str(tmp_path))
    monkeypatch.delenv("FAULTLENS_SIGNING_KEY", raising=False)
    args = argparse.Namespace(signing_key=None, secret_file=None)
    with caplog.at_level("WARNING"):
        observing, where = _signing_key(args, acting=False)
    assert where == "ephemeral" and "ephemeral command-signing key" in caplog.text
    assert not (tmp_path / EPHEMERAL_VERIFY_KEY).exists()  # nothing is sent: no receiver needs it
    acting, where = _signing_key(args, acting=True)
    public = tmp_path / EPHEMERAL_VERIFY_KEY
    assert str(public) in where and load_verify_keys([public]).ids == (acting.key_id,)
    assert acting.key_id != observing.key_id


@pytest.mark.long(40)
def test_a_second_up_stands_by_and_takes_over_when_the_first_stops(kafka_settings, tmp_path):
    # Two replicas of `up` on one broker: the diagnose consumer must see all of a job's telemetry,
    # so only one runs the pipeline (streams/lease.py); the other reads nothing until it leaves.
    suffix = uuid.uuid4().hex[:8]
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path / "home"), "FAULTLENS_LOG_LEVEL": "WARNING"}
    argv = ["up", "--bootstrap", kafka_settings.bootstrap, "--group-suffix", suffix, "--no-history", "--no-remediate"]
    first = pipeline.faultlens("up-1", argv, env, tmp_path)
    second = None
    try:
        assert wait_until(lambda: first.find(lambda line: line.get("event") == "ready"), what="the first up's ready",
                          progress=lambda: procs_progress([first]), stall_s=STALL_S), first.tail()
        second = pipeline.faultlens("up-2", argv, env, tmp_path)
        assert wait_until(lambda: "standing by" in second.tail(100_000), what="the second up standing by",
                          progress=lambda: procs_progress([first, second]), stall_s=STALL_S), second.tail()
        assert not second.find(lambda line: line.get("event") == "ready")
        stop_proc(first)
        assert wait_until(lambda: second.find(lambda line: line.get("event") == "ready"), what="the takeover",
                          progress=lambda: procs_progress([second]), stall_s=STALL_S), second.tail()
    finally:
        for proc in (first, second):
            if proc is not None:
                stop_proc(proc)
    assert second.popen.returncode == 0, second.tail()
