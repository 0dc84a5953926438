"""faultlens nodes: take a machine out of, or bring it back into, the scheduler by hand."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "drain or resume machines through the remediation actuator (Slurm, Kubernetes, a script)"
DESCRIPTION = """\
What the remediation consumer does on its own, for a person: `resume` brings machines back into
service once they passed their checks (Slurm: scontrol update State=RESUME; Kubernetes: uncordon
and remove the faultlens.io/fault taint; script: {"op": "bring_back", ...} on stdin), `drain` takes
them out (Slurm: State=DRAIN with a reason naming --diagnosis-id and --fault; Kubernetes: cordon +
NoSchedule taint). Run it where the scheduler credentials are (the remediation host).

Prints one JSON line per operation: the action record with its outcome (ok / error + why).
With --publish the record also goes to the `actions` topic, so the fault history keeps it.
Exit status 0 when every operation succeeded, 1 when one failed, 2 for bad flags."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faultlens.commands.remediate import add_actuator_arguments
    from streams.config import add_kafka_arguments

    parser.add_argument("op", choices=("resume", "drain"), help="resume: bring back; drain: take out")
    parser.add_argument("nodes", nargs="+", metavar="NODE", help="machine names as the scheduler knows them")
    parser.add_argument("--job", default="manual", help="the job the record is filed under (default 'manual')")
    parser.add_argument("--diagnosis-id", default="", help="the diagnosis that led to it (shown in the drain reason)")
    parser.add_argument("--fault", default="", help="the fault class (drain reason, Kubernetes taint value)")
    parser.add_argument("--reason", default="", help="free text for the scheduler's reason and the record")
    parser.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    parser.add_argument("--publish", action="store_true", help="also send the record to the `actions` topic")
    add_actuator_arguments(parser)
    add_kafka_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from faultlens.commands.remediate import build_actuator
    from remediation.actuators import ActionRequest, carry_out

    try:
        actuator = build_actuator(args)
        request = ActionRequest("bring_back" if args.op == "resume" else "take_out", args.job, tuple(args.nodes),
                                args.diagnosis_id, args.fault, args.reason or f"by hand: faultlens nodes {args.op}")
    except ValueError as exc:
        print(f"faultlens nodes: {exc}", file=sys.stderr)
        return 2
    if actuator.name == "none":
        print("faultlens nodes: name the scheduler with --actuator slurm|kubernetes|script (or FAULTLENS_ACTUATOR)",
              file=sys.stderr)
        return 2
    record = carry_out(actuator, request, "dry_run" if args.dry_run else "act")
    print(json.dumps(record.to_dict()), flush=True)
    if args.publish:
        _publish(args, record)
    return 1 if record.outcome == "error" else 0


def _publish(args: argparse.Namespace, record) -> None:
    from streams import topics
    from streams.connect import connected
    from streams.producer import Producer

    with connected(args, [topics.ACTIONS]) as settings, Producer(settings) as producer:
        producer.send(topics.ACTIONS, record.job.encode(), record.encode())
        producer.flush()
