"""`faultlens diagnose --workers N` (issue 56): who runs which stage in which group, and the children
dying with the launch however it ends."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faultlens.commands.diagnose_members import members_count, split_launch, workers_count
from tests.in_process import faultlens_main
from tests.progress import wait_until


def _args(**over) -> argparse.Namespace:
    base = {
        "stage": "all",
        "group": None,
        "workers": 3,
        "job_workers": 1,
        "metrics_port": 9400,
        "max_records": 500,
        "idle_stop": 5.0,
        "bootstrap": None,
        "_run": None,
        "_parser": object(),
    }
    return argparse.Namespace(**{**base, **over})


def test_workers_count_takes_a_count_or_auto():
    assert workers_count("4") == 4
    assert workers_count("auto") == max(1, min((os.cpu_count() or 1) - 1, 3))  # the job stage keeps up with 3
    for bad in ("0", "-2", "many"):
        with pytest.raises(argparse.ArgumentTypeError):
            workers_count(bad)


def test_stage_all_is_node_children_and_the_job_stage_here():
    own, [(child, children)] = split_launch(_args())
    assert (own.stage, own.group, own.workers) == ("job", "faultlens-diagnose-job", 1)
    assert (child.stage, child.group, children) == ("node", "faultlens-diagnose-node", 3)
    # the launch keeps the port and the cap; no child binds the port or stops the launch early
    assert (own.metrics_port, own.max_records) == (9400, 500)
    assert (child.metrics_port, child.max_records, child.workers) == (None, None, 1)
    assert not hasattr(child, "_parser") and child.idle_stop == 5.0
    own, [(child, _)] = split_launch(_args(group="team"))
    assert (own.group, child.group) == ("team-job", "team-node")


def test_job_workers_add_job_stage_children_to_the_launchs_group():
    own, kinds = split_launch(_args(workers=2, job_workers=3))
    assert (own.stage, own.group) == ("job", "faultlens-diagnose-job")
    assert [(c.stage, c.group, n) for c, n in kinds] == [
        ("node", "faultlens-diagnose-node", 2),
        ("job", "faultlens-diagnose-job", 2),  # the launch is the third
    ]
    for child, _ in kinds:
        assert (child.metrics_port, child.max_records, child.workers, child.job_workers) == (None, None, 1, 1)
        assert not hasattr(child, "_parser")
    with pytest.raises(argparse.ArgumentTypeError):
        members_count("auto")


def test_a_single_stage_launch_is_this_member_and_n_minus_one_more():
    own, [(child, children)] = split_launch(_args(stage="node", group="g"))
    assert (own.stage, child.stage, own.group, child.group, children) == ("node", "node", "g", "g", 2)


def _children(pid: int) -> list[int]:
    """Live members started by ``pid`` (Linux /proc): multiprocessing's spawned children, not its
    resource tracker."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                spawned = b"spawn_main" in (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z" and spawned:
                kids.append(int(entry.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.broker
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_children_end_with_the_launch(kafka_settings, group_name, tmp_path, how):
    log = tmp_path / "diagnose.log"
    with log.open("wb") as out:
        launch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "faultlens",
                "-v",
                "diagnose",
                "--workers",
                "2",
                "--group",
                group_name,
                "--bootstrap",
                kafka_settings.bootstrap,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def started():
            kids = _children(launch.pid)
            return kids if len(kids) == 2 and log.read_text().count("started 2 node-stage") else None

        kids = wait_until(
            started,
            progress=lambda: (log.stat().st_size, len(_children(launch.pid))),
            stall_s=90,
            what="the launch's two node-stage children",
            explain=log.read_text,
        )
        launch.send_signal(how)
        launch.wait()
        wait_until(
            lambda: not any(_alive(k) for k in kids),
            progress=lambda: (log.stat().st_size, sum(map(_alive, kids))),
            stall_s=90,
            what="the children to end with the launch",
            explain=log.read_text,
        )
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()


def _acts(found):
    """What acts, on which nodes, leaving out the streams' end: the launch's job stage stops because its
    input ended and names each job's end as it stops (telemetry_lost, action none, "the stream
    stopped": the runner's input_ended), where a trace's end judges no absence offline."""
    return sorted((d.fault, d.action, tuple(sorted(d.nodes))) for d in found
                  if not (d.fault == "telemetry_lost" and d.action == "none"))


def _launch_over(bootstrap: str, *flags: str) -> list[dict]:
    """Each member's last line."""
    # An idle stop past the upstream writers' time to live: waited out by the launch, it named the
    # stopped node stage (it does with the children's end unheeded).
    done = subprocess.run(
        [sys.executable, "-m", "faultlens", "diagnose", *flags, "--idle-stop", "20", "--bootstrap", bootstrap],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _replay(trace: Path, bootstrap: str) -> None:
    # By main() in this process (tests/in_process.py): the launch reads what it wrote, not where it
    # ran, and an interpreter with its imports (~1 CPU-s) is saved.
    done = faultlens_main("replay", trace, "--as-fast-as-possible", "--no-progress", "--bootstrap", bootstrap)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.broker
def test_a_launch_over_a_backlog_gives_the_offline_diagnoses_and_ends_with_its_children(own_kafka_settings, tmp_path):
    """`--workers 2 --idle-stop`: once both node-stage children stop at their idle stop, the launch
    reads what they wrote last and stops, with what `analyze` finds (what acts, on which nodes);
    waiting out its own idle stop it also named the stopped node stage (a telemetry_lost alert)."""
    from bench.testbed import foreign
    from bench.testbed.topic_reads import job_records
    from faultlens.diagnosis.engine.offline import analyze_trace
    from faultlens.events.diagnosis_record import Diagnosis

    trace = foreign.write_parquet("failslow_corroborated", tmp_path)
    _replay(trace, own_kafka_settings.bootstrap)
    _launch_over(own_kafka_settings.bootstrap, "--workers", "2")
    latest = {d.id: d for d in job_records(own_kafka_settings, "diagnoses", Diagnosis.decode)}
    offline, _ = analyze_trace(trace)
    assert _acts(latest.values()) == _acts(offline)
    assert len(offline) == 8


@pytest.mark.broker
def test_a_launch_of_two_node_and_two_job_members_gives_the_offline_diagnoses(own_kafka_settings, tmp_path):
    """`--workers 2 --job-workers 2`: two jobs' backlog through two node-stage children and two
    job-stage members (the launch and a child, splitting the jobs by their `summaries` partition);
    every job gets what `analyze` finds in it, and nothing else, and the launch ends on its own
    (its job-stage child stops with it once the node stage's last word is read)."""
    from bench.testbed import foreign
    from bench.testbed.topic_reads import job_records
    from faultlens.diagnosis.engine.offline import analyze
    from faultlens.events.diagnosis_record import Diagnosis
    from faultlens.events.topics import key_partition
    from faultlens.events.trace import trace_order, write_trace

    # Jobs on `summaries` partitions 1 and 2 of 3: two members split the three partitions {0, 1} and
    # {2} (the range assignor) or {0, 2} and {1} (round robin), so each member holds one job.
    cases = [foreign.load(name) for name in ("failslow_corroborated", "xid_two_sources")]
    assert [key_partition(c.job.encode(), 3) for c in cases] == [1, 2]
    trace = tmp_path / "two-jobs.parquet"
    write_trace(trace, sorted((e for c in cases for e in c.events), key=trace_order))
    _replay(trace, own_kafka_settings.bootstrap)
    lines = _launch_over(own_kafka_settings.bootstrap, "--workers", "2", "--job-workers", "2")
    job_members = [line for line in lines if line["stage"] == "job"]
    assert len(job_members) == 2 and all(line["diagnoses"] for line in job_members), lines
    by_job: dict[str, dict] = {}
    for d in job_records(own_kafka_settings, "diagnoses", Diagnosis.decode):
        by_job.setdefault(d.job, {})[d.id] = d
    assert set(by_job) <= {c.job for c in cases}
    for case in cases:
        assert _acts(by_job.get(case.job, {}).values()) == _acts(analyze(case.events)), case.name
