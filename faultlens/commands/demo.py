"""faultlens demo: the whole pipeline live against a simulated cluster and a real torch job."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultlens.events.env_number import env_number, env_whole

if TYPE_CHECKING:  # imported by each function that uses them: `faultlens --help` stays light
    from faultlens.demo.state import DemoState
    from faultlens.events.signing import SigningKey
    from faultlens.pipeline import PipelineOptions
    from faultlens.simulator import SimulatedCluster

HISTORY_DB = "history.duckdb"  # in the run's folder

log = logging.getLogger(__name__)

HELP = "run the whole pipeline live on the embedded broker against a simulated cluster (and a real torch job)"
DESCRIPTION = """\
Uses --bootstrap, else the broker registered on this machine, else starts the embedded broker and
registers it in $FAULTLENS_HOME/broker.json (as `faultlens up` does); runs the diagnosis, remediation and history consumers
(as `faultlens up`, with remediation ACTING on the demo jobs), and then:

  * a simulated cluster (default 64 nodes x 8 GPUs) with the ByteRobust fault mix, every fault
    class at least once, run at --speed x simulated time; it obeys the commands that come back,
    screened as a real trainer screens them (a forged command is sent once to show the refusal);
  * a small real torch job (the reference trainer under the launcher, CPU, job demo-trainer)
    with a NaN injected: diagnose -> rollback -> the launcher restarts from the checkpoint
    (skipped, with a note, when torch is missing or with --no-trainer).

A live view shows the node grid, incidents, commands and counters (plain status lines on stderr
when stdout is not a terminal, or with --no-live). At the end: a report of what was injected, what
was found (detection latency, command, time to command), what was wrongly blamed, the jobs' ETTR
from the DuckDB history, the ETTR this run's detection would give a 9,600-GPU, 90-day job
(`faultlens ettr`), and where the history, the plots and a self-contained HTML report
(report.html: open it in a browser) were written (--out, default a fresh
$FAULTLENS_HOME/demo-<timestamp>/). --json prints the report as JSON lines instead.
Ctrl-C ends the run cleanly with a partial report."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faultlens.streams.config import add_kafka_arguments

    parser.add_argument("--nodes", type=int, default=env_whole("FAULTLENS_DEMO_NODES", 64, on_bad="raise"),
                        help="simulated nodes (default 64)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per simulated node (default 8)")
    parser.add_argument("--duration", type=float, default=None,
                        help="simulated seconds (default: what one fault of every class needs, ~1400)")
    parser.add_argument("--speed", type=float, default=env_number("FAULTLENS_DEMO_SPEED", 20.0, on_bad="raise"),
                        help="simulated seconds per wall second (default 20); 0: lockstep, as fast as the pipeline keeps up")
    parser.add_argument("--seed", type=int, default=0, help="fault plan and telemetry seed (default 0)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the history, plots and logs")
    parser.add_argument("--no-live", action="store_true", help="plain status lines instead of the live view")
    parser.add_argument("--json", action="store_true", help="print the final report as JSON lines")
    parser.add_argument("--no-trainer", action="store_true", help="skip the real torch job")
    parser.add_argument("--trainer-nodes", type=int, default=2, help="nodes of the real torch job (default 2)")
    parser.add_argument("--trainer-procs", type=int, default=1, help="processes per node of the torch job (default 1)")
    parser.add_argument("--sample-rate", type=float, default=0.1,
                        help="share of gpu samples stored in the history (default 0.1)")
    add_kafka_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from faultlens.demo import summary
    from faultlens.demo.live import LiveRun
    from faultlens.demo.state import DemoState
    from faultlens.demo.trainer import TRAINER_JOB, torch_missing
    from faultlens.events.home import faultlens_home
    from faultlens.events.signing import ephemeral_signing_key
    from faultlens.streams.config import KafkaSettings

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = args.out or faultlens_home() / f"demo-{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    sim_job = "demo-sim"
    try:
        cluster, duration = _simulated_cluster(args, sim_job)
        settings = KafkaSettings.from_args(args)
    except ValueError as exc:
        print(f"faultlens demo: {exc}", file=sys.stderr)
        return 2
    want_trainer = not args.no_trainer
    if want_trainer and (why := torch_missing()):
        notes.append(why)
        want_trainer = False
    # The demo is its own deployment: an ephemeral pair, its public half handed to its receivers.
    signing_key = ephemeral_signing_key("the demo: its simulated cluster and trainer trust this key only")
    notes.append(f"commands are signed with an ephemeral key {signing_key.key_id} made for this run")
    state = DemoState(sim_job=sim_job, trainer_job=TRAINER_JOB if want_trainer else None)
    options = _pipeline_options(args, out_dir, stamp, state, signing_key)
    live = LiveRun(settings, options, state, signing_key, notes).run(args, cluster, duration, out_dir, want_trainer)
    if live is None:
        return 1

    ettr, files = _history_files(out_dir / HISTORY_DB, cluster.labels, out_dir)
    report = summary.build(state, cluster.labels, trainer_events=live.trainer_events, ettr=ettr, files=files,
                           pipeline=live.consumer_stats, interrupted=live.interrupted, notes=notes)
    if args.json:
        for line in summary.json_lines(report):
            sys.stdout.write(line.decode() + "\n")
        sys.stdout.flush()
    else:
        summary.render(report)
    return 130 if live.interrupted else 0


def _simulated_cluster(args: argparse.Namespace, sim_job: str) -> tuple[SimulatedCluster, float]:
    """The simulated job with one fault of each class, and how long it runs; ValueError for bad flags."""
    from faultlens.simulator import SIM_CLASSES, SimConfig, SimulatedCluster, plan_for

    if args.speed < 0:
        raise ValueError("--speed must be >= 0")
    config = SimConfig(nodes=args.nodes, gpus=args.gpus, job=sim_job, seed=args.seed)
    config.layout()
    plan, duration = plan_for(config, faults=len(SIM_CLASSES), duration=args.duration)
    if args.duration is None:
        duration += 60.0  # room to detect and obey the last fault
    # Anchored so the simulated run ends now: the history's timeline reads as today's run, and
    # a simulation faster than real time never stamps events in the future (a consumer judges
    # such stamps as a broken clock).
    config = dataclasses.replace(config, start_ts=round(time.time() - duration))
    return SimulatedCluster(config, plan, auto_recover=False), duration


def _pipeline_options(args: argparse.Namespace, out_dir: Path, stamp: str, state: DemoState,
                      signing_key: SigningKey) -> PipelineOptions:
    from faultlens.demo.trainer import TRAINER_JOB
    from faultlens.demo.wiring import DiagnosisTap
    from faultlens.pipeline import PipelineOptions
    from faultlens.remediation.decision import PolicyConfig
    from faultlens.remediation.safety import SafetyConfig

    return PipelineOptions(
        signing_key=signing_key, db=out_dir / HISTORY_DB, history_sample_rate=args.sample_rate,
        # Remediation runs on each diagnosis's own time, so its windows (dedup, eviction caps, the
        # ladder's episodes) are simulated seconds for the simulated job and wall seconds for the
        # real one. Windows are short because the demo packs a fleet-day of every fault class into
        # ~20 simulated minutes (one fault every ~80 s); production keeps the 600 s defaults.
        policy=PolicyConfig(act_on=frozenset({state.sim_job, TRAINER_JOB}), episode_s=60.0),
        safety=SafetyConfig(window_s=120.0, max_evictions=max(8, args.nodes // 4), max_job_share=0.25,
                            breaker_share=0.5, dedup_s=60.0),
        decision_log=out_dir / "decisions.jsonl",
        group_suffix=f"demo-{stamp}-{os.getpid()}", on_decision=state.on_decision,
        # Lockstep: whatever the driver published is on the topics, so a silent partition has
        # nothing more to say; jobs keep their own event time (the trainer runs on the wall clock).
        max_idle_s=0.1,
        wrap_remediation=DiagnosisTap(state.on_diagnosis, event_time=True).wrap,
    )


def _history_files(db: Path, labels: list[dict[str, Any]], out_dir: Path) -> tuple[Any, dict[str, Any]]:
    """The run's ETTR and the files written from its history (plots, the HTML report)."""
    import duckdb

    from faultlens.demo import summary
    from faultlens.demo.compact import compact_history
    from faultlens.history import html_report
    from faultlens.history.plots import render_pngs, write_plots
    from faultlens.history.queries import run as query
    from faultlens.history.schema import open_history
    from faultlens.history.sink import HistorySink, build_batch

    conn = open_history(db)
    try:
        # The demo knows the truth it injected: stored beside the diagnoses, the history's
        # over-eviction and wrongly-blamed sections judge against it instead of the engine's own word.
        HistorySink(conn).write(build_batch([], labels=labels))
        ettr = query(conn, "ettr")
        pngs = render_pngs(conn)  # drawn once: the files and the HTML report's figures
        plots = write_plots(conn, out_dir / "plots", pngs)
        html = html_report.write(conn, out_dir / "report.html", source=str(db), charts=pngs)
    finally:
        conn.close()
    try:
        compact_history(db)
    except (OSError, duckdb.Error) as exc:  # the run's results stand without it: only the file is bigger
        log.warning("history %s left as written (not compacted): %s", db, exc)
    return ettr, summary.files_of(out_dir, db, plots, html)
