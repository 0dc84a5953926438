"""faultlens diagnose: the diagnosis consumer group (telemetry + jobs → diagnoses)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from faultlens.commands.diagnose_members import Members, members_count, workers_count
from faultlens.commands.json_line import say_json
from faultlens.diagnosis.edge.consumer import DIAGNOSES_TOPIC, GROUP, JOB_GROUP, STAGES, TopicLayoutError, diagnose_consumer
from faultlens.diagnosis.edge.node_consumer import NODE_GROUP
from faultlens.engine_flags import add_engine_arguments, engine_config
from faultlens.events import topics
from faultlens.events.topics import TELEMETRY_TOPICS
from faultlens.streams import metrics
from faultlens.streams.config import KafkaSettings, add_kafka_arguments
from faultlens.streams.connect import connected
from faultlens.streams.lease import Lease, await_lease

log = logging.getLogger(__name__)

HELP = "run the diagnosis consumer: telemetry → diagnoses (one stage, or both in one process)"
DESCRIPTION = """\
Runs the diagnosis engine as a consumer group (docs/design.md §1), in event-time order across every
partition and topic (a backlog after an outage gives what `faultlens analyze` gives on the same
events), with the compacted `jobs` topic read in full by every member.

  --stage all   telemetry → diagnoses, both stages in one process (group faultlens-diagnose).
                One ACTIVE member per group: a member that read only some telemetry partitions
                would judge a job from some of its machines (a wave unseen, an eviction on one
                flap). Further replicas of the group are hot standbys: they hold the topic
                `<group>.lease` (one partition, its own consumer group) or wait for it, read
                nothing meanwhile, and the one the broker hands it to takes over when the active
                member exits or dies (within the Kafka session timeout). To scale out, run the
                node and job stages below as groups of their own (docs/deploying.md).
  --stage node  telemetry (keyed by node) → `summaries` (keyed by job): log parsing, node rules,
                feature windows, and the events the job stage reads. Scale by adding members
                (group faultlens-diagnose-node) and telemetry partitions.
  --stage job   `summaries` → `diagnoses`: first failing rank, silence, peer anomaly, hang and
                fail-slow localisation, dedup / escalation. Scale by adding members (group
                faultlens-diagnose-job) and `summaries` partitions: a job lives on one partition.

  --workers N   (with --stage all) one launch on many cores: N node-stage members as child
                processes (group <group>-node) and the job stage in this process (group
                <group>-job), the split deployment above started at once; with --stage node or
                job, N members of that stage (this process and N-1 children). The children exit
                with this process. `auto`: one node member per core but one, at most 3 (docs/deploying.md).
  --job-workers M
                (with --stage all) M job-stage members in that launch: this process and M-1
                children in <group>-job (default 1). They split the jobs (a job lives on one
                `summaries` partition): more than one helps only where several jobs are read.

Unreadable or invalid events go to `dead-letter` with the reason; an event stamped far in the
future is judged at its arrival (clock_skew alert); a sample too late to judge is counted, a
late fault report is still diagnosed. On exit prints one JSON line with the run's counts."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stage", choices=STAGES, default=os.environ.get("FAULTLENS_DIAGNOSE_STAGE", "all"),
                        help="which stage to run (default all; env FAULTLENS_DIAGNOSE_STAGE)")
    parser.add_argument("--group", default=os.environ.get("FAULTLENS_DIAGNOSE_GROUP"),
                        help=f"consumer group (default {GROUP}, {NODE_GROUP} or {JOB_GROUP} by stage; "
                             "env FAULTLENS_DIAGNOSE_GROUP)")
    parser.add_argument("--idle-stop", type=float, default=None,
                        help="exit after this many seconds without input (replays, tests); a stage-all "
                             "standby exits after this long without the lease")
    parser.add_argument("--max-records", type=int, default=None, help="exit after this many records")
    parser.add_argument("--workers", type=workers_count, default=os.environ.get("FAULTLENS_DIAGNOSE_WORKERS", "1"),
                        help="members this launch runs, as child processes (see above; default 1: one "
                             "process; `auto`: one per core but one, at most 3; env FAULTLENS_DIAGNOSE_WORKERS)")
    parser.add_argument("--job-workers", type=members_count,
                        default=os.environ.get("FAULTLENS_DIAGNOSE_JOB_WORKERS", "1"),
                        help="with --stage all: job-stage members of the launch (see above; default 1; "
                             "env FAULTLENS_DIAGNOSE_JOB_WORKERS)")
    add_engine_arguments(parser)
    metrics.add_metrics_argument(parser)
    add_kafka_arguments(parser)


def run(args: argparse.Namespace, ready: Callable[[Any], None] | None = None) -> int:
    """The command; ``ready`` is called with the runner right before the member joins its group
    (diagnose_members)."""
    job_workers = getattr(args, "job_workers", 1)
    if job_workers > 1 and args.stage != "all":
        log.error("--job-workers is for --stage all (with --stage job, --workers counts its members)")
        return 2
    config = engine_config(args)
    wanted = [*TELEMETRY_TOPICS, topics.JOBS, topics.SUMMARIES, DIAGNOSES_TOPIC, topics.DEAD_LETTER]
    # SIGTERM/SIGINT before the runner's own handlers (standing by, priming): a clean stop, with
    # the lease handed on at once, not death by the default handler.
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with connected(args, wanted) as settings:
            metrics.serve(args.metrics_port)
            if args.workers > 1 or job_workers > 1:
                with Members(args, settings, run) as members:
                    return _run_pipeline(members.own_args, settings, engine_config(members.own_args), None, stop,
                                         members, ready=members.ready)
            lease = None
            if args.stage == "all":
                # One active member per stage-all group (streams/lease.py); the others wait, reading
                # nothing, and say so on /metrics (faultlens_lease_held 0).
                lease = Lease(settings, args.group or GROUP)
                metrics.register_gauges("diagnose-lease", lambda: {"lease_held": float(lease.held)})
                if not await_lease(lease, args.idle_stop, stop):
                    lease.release()
                    say_json({"stage": args.stage, "standby": True, "records": 0, "diagnoses": 0})
                    return 0
            try:
                return _run_pipeline(args, settings, config, lease, stop, ready=ready)
            finally:
                if lease is not None:
                    lease.release()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_pipeline(args: argparse.Namespace, settings: KafkaSettings, config, lease: Lease | None,
                  stop: threading.Event, members: Members | None = None,
                  ready: Callable[[Any], None] | None = None) -> int:
    try:
        runner, handler = diagnose_consumer(settings, config, stage=args.stage, group=args.group)
    except TopicLayoutError as exc:
        log.error("%s", exc)
        return 2
    if lease is not None:
        lease.watch(runner.stop)
    if members is not None:
        members.watch(runner.stop, runner.stop_when_drained)
    metrics.register_runner(f"diagnose-{args.stage}", lambda: runner.stats)
    if ready is not None:
        ready(runner)
    if stop.is_set():
        runner.stop()  # stopped while starting: the run ends at once, committing nothing new
    stats = runner.run(max_records_total=args.max_records, idle_stop_s=args.idle_stop)
    if lease is not None and lease.lost.is_set():
        # Another member holds the lease and rebuilds this state from retained input: what is
        # pending here is not this member's to send.
        log.error("lost the lease %s after %d record(s): exiting so that only one member acts", lease.topic,
                  stats.records_in)
        return 3
    # Pending decisions (an open NCCL incident, final counts, open windows) go out before we leave.
    final = handler.flush()
    if final:
        _send(settings, final)
    # late: samples too far behind their job's time (counted, not judged); late_faults: fault
    # reports diagnosed although late; clock_skew: events whose sender's clock was off.
    engine = getattr(handler, "engine", None)
    counts = {"late": 0, "late_faults": 0, "clock_skew": 0, **(engine.stats if engine else {})}
    say_json({"stage": args.stage, "records": stats.records_in, "outputs": handler.emitted,
              "diagnoses": handler.emitted if engine else 0, "dead_letters": stats.dead_letters,
              "oversized": stats.oversized, "skewed": stats.skewed,
              "forced_early": runner.merge.forced if runner.merge else 0,
              "late_released": stats.late_released, "first_read_at": stats.first_read_at,
              "last_handled_at": stats.last_handled_at, **counts})
    if members is not None and members.failed is not None:
        return members.failed
    return 0


def _send(settings: KafkaSettings, records) -> None:
    from faultlens.streams.producer import Producer

    producer = Producer(settings)
    try:
        producer.send_all(records)
        producer.flush()
    finally:
        producer.close()
