"""faultlens nodes: the fleet record of machines across jobs, and taking a machine out of, or
bringing it back into, the scheduler by hand."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time

HELP = "the fleet record of machines (list, show) and draining / resuming them by hand"
DESCRIPTION = """\
`list` prints every machine remediation has a record of (the compacted `fleet` topic, shared by
all remediation members: docs/fleet.md): its state (in_service, taken_out, or hardware_inspection
for a lemon), the faults that counted against it and in how many jobs, failed stop-time checks,
evictions and the lemon verdict. `show NODE` prints one machine's record in full: every fault
with its diagnosis id and whether it counted (and why not), the check outcomes, each eviction and
how it ended (out, back, ran_clean, failed_again), the lemon verdict and the resumes. --json
prints one JSON object per machine instead.

What the remediation consumer does on its own, for a person: `resume` brings machines back into
service (Slurm: scontrol update State=RESUME; Kubernetes: uncordon and remove the
faultlens.io/fault taint; script: {"op": "bring_back", ...} on stdin) and records the resume in
each machine's fleet record, which lifts a lemon verdict: remediation hands the machine out as a
spare again, and only new failures count against it. `drain` takes machines out (Slurm:
State=DRAIN with a reason naming --diagnosis-id and --fault; Kubernetes: cordon + NoSchedule
taint). Run them where the scheduler credentials are (the remediation host); --record-only
records a resume done some other way, without the actuator.

`resume` and `drain` print one JSON line per operation: the action record with its outcome (ok /
error + why). With --publish the record also goes to the `actions` topic, so the fault history
keeps it. The fleet topic is read and written on the broker of --bootstrap / FAULTLENS_BOOTSTRAP
(or the running embedded broker); no broker is started for it. Exit status 0 when every
operation succeeded; 1 when one failed (a resume that could not be recorded included), when there is
no broker, or when list / show cannot read the fleet record; 2 for bad flags."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faultlens.commands.remediate import add_actuator_arguments
    from faultlens.streams.config import add_kafka_arguments

    parser.add_argument(
        "op",
        choices=("list", "show", "resume", "drain"),
        help="list / show NODE: the fleet record; resume: bring back; drain: take out",
    )
    parser.add_argument("nodes", nargs="*", metavar="NODE", help="machine names as the scheduler knows them")
    parser.add_argument("--json", action="store_true", help="list / show: one JSON object per machine")
    parser.add_argument("--job", default="manual", help="the job the record is filed under (default 'manual')")
    parser.add_argument("--diagnosis-id", default="", help="the diagnosis that led to it (shown in the drain reason)")
    parser.add_argument("--fault", default="", help="the fault class (drain reason, Kubernetes taint value)")
    parser.add_argument("--reason", default="", help="free text for the scheduler's reason and the record")
    parser.add_argument("--by", default=os.environ.get("USER") or "", help="resume: who (default $USER)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    parser.add_argument("--publish", action="store_true", help="also send the record to the `actions` topic")
    parser.add_argument(
        "--record-only",
        action="store_true",
        help="resume: only record it in the fleet record (the machine was resumed another way)",
    )
    parser.add_argument(
        "--no-record", action="store_true", help="resume: leave the fleet record alone (a lemon stays out of remediation's pools)"
    )
    add_actuator_arguments(parser)
    add_kafka_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.op in ("list", "show"):
        return _show(args)
    if not args.nodes:
        print(f"faultlens nodes {args.op}: name at least one NODE", file=sys.stderr)
        return 2
    if args.record_only:
        if args.op != "resume":
            print("faultlens nodes: --record-only is for resume", file=sys.stderr)
            return 2
        return _record_resumes(args)
    from faultlens.commands.remediate import build_actuator
    from faultlens.remediation.actuators import ActionRequest, carry_out

    try:
        actuator = build_actuator(args)
        request = ActionRequest(
            "bring_back" if args.op == "resume" else "take_out",
            args.job,
            tuple(args.nodes),
            args.diagnosis_id,
            args.fault,
            args.reason or f"by hand: faultlens nodes {args.op}",
        )
    except ValueError as exc:
        print(f"faultlens nodes: {exc}", file=sys.stderr)
        return 2
    if actuator.name == "none":
        print(
            "faultlens nodes: name the scheduler with --actuator slurm|kubernetes|script (or FAULTLENS_ACTUATOR)", file=sys.stderr
        )
        return 2
    record = carry_out(actuator, request, "dry_run" if args.dry_run else "act")
    print(json.dumps(record.to_dict()), flush=True)
    if args.publish:
        _publish(args, record)
    status = 1 if record.outcome == "error" else 0
    if args.op == "resume" and record.outcome == "ok" and not args.no_record:
        status = max(status, _record_resumes(args, quiet_without_broker=True))
    return status


def _broker(args: argparse.Namespace):
    """Settings for a broker the person named or runs; None (with a line on stderr) when there is none."""
    from faultlens.streams.broker import running_embedded
    from faultlens.streams.config import KafkaSettings

    try:
        settings = KafkaSettings.from_args(args)
    except ValueError as exc:
        print(f"faultlens nodes: {exc}", file=sys.stderr)
        return None
    settings.bootstrap = settings.bootstrap or running_embedded()
    return settings if settings.bootstrap else None


def _show(args: argparse.Namespace) -> int:
    from faultlens.remediation.fleet_log import read_fleet
    from faultlens.remediation.fleet_view import detail, list_lines, show_lines, summary
    from faultlens.remediation.lemon import LemonConfig

    if args.op == "show" and not args.nodes:
        print("faultlens nodes show: name a NODE", file=sys.stderr)
        return 2
    settings = _broker(args)
    if settings is None:
        from faultlens.streams.broker import no_broker_message

        print(f"faultlens nodes {args.op}: {no_broker_message()}", file=sys.stderr)
        return 1
    records, errors = read_fleet(settings)
    if errors and not records:
        # An unreadable record is not an empty fleet: "no machine yet" would hide a lemon.
        print(
            f"faultlens nodes {args.op}: the fleet record at {settings.bootstrap} could not be read, which is not "
            f"an empty fleet: {errors[0]}",
            file=sys.stderr,
        )
        return 1
    for e in errors:
        print(f"faultlens nodes: {e}", file=sys.stderr)
    now, clean_s = time.time(), LemonConfig().clean_s
    if args.op == "list":
        rows = [summary(records[n], now, clean_s) for n in sorted(records)]
        rows.sort(key=lambda s: (s["state"] != "hardware_inspection", -s["counted"], s["node"]))
        for line in [json.dumps(r) for r in rows] if args.json else list_lines(rows):
            print(line)
        return 0
    missing = [n for n in args.nodes if n not in records]
    for n in args.nodes:
        if n in records:
            print(json.dumps(detail(records[n], now, clean_s)) if args.json else "\n".join(show_lines(records[n], now, clean_s)))
    for n in missing:
        print(f"faultlens nodes show: no fleet record of {n} (remediation has decided nothing about it)", file=sys.stderr)
    return 1 if missing else 0


def _record_resumes(args: argparse.Namespace, quiet_without_broker: bool = False) -> int:
    """Add a person's resume to each machine's fleet record (lifting a lemon verdict)."""
    from faultlens.remediation.fleet import Fleet
    from faultlens.remediation.fleet_log import FleetLog

    if args.dry_run:
        return 0
    settings = _broker(args)
    if settings is None:
        print(
            "faultlens nodes: the resume is not in the fleet record (no broker: give --bootstrap); a lemon stays "
            "out of remediation's standby pools until it is recorded (faultlens nodes resume NODE --record-only)",
            file=sys.stderr,
        )
        return 0 if quiet_without_broker else 2
    store = FleetLog(settings, read_timeout_s=30.0)
    try:
        fleet = Fleet()  # no store: each resume is published below, and a failure is reported
        fleet.records = store.load()
        if store.errors and not fleet.records:
            print(f"faultlens nodes: {store.errors[0]}", file=sys.stderr)
            return 1
        by = args.by or getpass.getuser()
        for node in args.nodes:
            was = fleet.record(node).state()
            record = fleet.resumed(node, time.time(), by, args.reason or "faultlens nodes resume")
            store.save({node: record})
            print(
                json.dumps({"node": node, "fleet_record": "resume recorded", "was": was, "now": record.state(), "by": by}),
                flush=True,
            )
    except OSError as exc:
        print(f"faultlens nodes: the resume is not in the fleet record: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    return 0


def _publish(args: argparse.Namespace, record) -> None:
    from faultlens.events import topics
    from faultlens.streams.connect import connected
    from faultlens.streams.producer import Producer

    with connected(args, [topics.ACTIONS]) as settings, Producer(settings) as producer:
        producer.send(topics.ACTIONS, record.job.encode(), record.encode())
        producer.flush()
