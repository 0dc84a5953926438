"""`faultlens diagnose --workers N` (issue 56): who runs which stage in which group, and the children
dying with the launch however it ends."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faultlens.commands.diagnose_members import split_launch, workers_count
from tests.progress import wait_until


def _args(**over) -> argparse.Namespace:
    base = {
        "stage": "all",
        "group": None,
        "workers": 3,
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
    own, child, children = split_launch(_args())
    assert (own.stage, own.group, own.workers) == ("job", "faultlens-diagnose-job", 1)
    assert (child.stage, child.group, children) == ("node", "faultlens-diagnose-node", 3)
    # the launch keeps the port and the cap; no child binds the port or stops the launch early
    assert (own.metrics_port, own.max_records) == (9400, 500)
    assert (child.metrics_port, child.max_records, child.workers) == (None, None, 1)
    assert not hasattr(child, "_parser") and child.idle_stop == 5.0
    own, child, _ = split_launch(_args(group="team"))
    assert (own.group, child.group) == ("team-job", "team-node")


def test_a_single_stage_launch_is_this_member_and_n_minus_one_more():
    own, child, children = split_launch(_args(stage="node", group="g"))
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
    bootstrap = own_kafka_settings.bootstrap
    subprocess.run(
        [
            sys.executable,
            "-m",
            "faultlens",
            "replay",
            str(trace),
            "--as-fast-as-possible",
            "--no-progress",
            "--bootstrap",
            bootstrap,
        ],
        check=True,
        capture_output=True,
    )
    # An idle stop past the upstream writers' time to live: waited out by the launch, it named the
    # stopped node stage (it does with the children's end unheeded).
    done = subprocess.run(
        [sys.executable, "-m", "faultlens", "diagnose", "--workers", "2", "--idle-stop", "20", "--bootstrap", bootstrap],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    latest = {d.id: d for d in job_records(own_kafka_settings, "diagnoses", Diagnosis.decode)}

    def acts(found):
        return sorted((d.fault, d.action, tuple(sorted(d.nodes))) for d in found)

    offline, _ = analyze_trace(trace)
    assert acts(latest.values()) == acts(offline)
    assert len(offline) == 8
