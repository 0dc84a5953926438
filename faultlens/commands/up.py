"""faultlens up: the diagnosis, remediation and history consumers in one process."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from faultlens.events.env_number import env_number

log = logging.getLogger(__name__)

HELP = "run the whole pipeline in one process: diagnose + remediate + history"
DESCRIPTION = """\
Connects to the broker (--bootstrap / FAULTLENS_BOOTSTRAP / --config, else the embedded broker
registered on this machine in $FAULTLENS_HOME/broker.json); with none, starts the embedded broker
and registers it there, so `collect`, `replay`, `record`, `diagnose` started beside it use it.
Creates the topics and runs three consumer groups in one process, one thread each:

  diagnose   telemetry + jobs → diagnoses          (alone: `faultlens diagnose`)
  remediate  diagnoses → signed commands           (alone: `faultlens remediate`)
  history    every topic → DuckDB fault history    (alone: `faultlens history`)

Each consumer also runs alone with its own command (same groups, so they can be split across
machines later). Remediation is observe-only by default: nothing goes to `commands` until a job
is switched on with --act-on JOB (repeatable, or FAULTLENS_ACT_ON=j1,j2) or --act-on-all;
--dry-run decides and signs but sends nothing. Each job's escalation ladder and handed-out warm
standbys survive a restart in --state-file (default $FAULTLENS_HOME/remediation-state.json).
--actuator slurm|kubernetes|script also acts on the scheduler for those jobs (drain / cordon
evicted machines, requeue the job, resume machines that passed their checks); see
`faultlens remediate --help`.

Commands are signed with the Ed25519 private key of --signing-key / FAULTLENS_SIGNING_KEY (from
`faultlens keys generate --out DIR`). Without one, `up` makes an ephemeral pair and says so; when
it acts, it writes that pair's public key to $FAULTLENS_HOME/ephemeral-command-verify-key.pem
(named in the ready line) for local receivers' --verify-key.

Replicas: a second `up` against the same broker (same --group-suffix) stands by, consuming
nothing, until the first leaves or dies, then takes over: the diagnose consumer must see all of a
job's telemetry, so one member of its group acts (streams/lease.py, docs/deploying.md).

Prints one JSON line when every consumer has joined its group ({"event": "ready", ...}) and one
at exit with per-consumer counts. Ctrl-C / SIGTERM stops cleanly: each consumer finishes its
batch and commits, and an embedded broker this command started stops last."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faultlens.commands.remediate import add_policy_arguments
    from faultlens.engine_flags import add_engine_arguments
    from faultlens.streams.config import add_kafka_arguments

    g = parser.add_argument_group("consumers")
    g.add_argument("--no-diagnose", action="store_true", help="do not run the diagnosis consumer")
    g.add_argument("--no-remediate", action="store_true", help="do not run the remediation consumer")
    g.add_argument("--no-history", action="store_true", help="do not run the history consumer")
    g.add_argument("--group-suffix", default=os.environ.get("FAULTLENS_GROUP_SUFFIX", ""),
                   help="append -SUFFIX to every consumer group (default none; env FAULTLENS_GROUP_SUFFIX)")
    g.add_argument("--db", type=Path, default=None,
                   help="history: DuckDB file (default $FAULTLENS_DB or $FAULTLENS_HOME/history.duckdb)")
    g.add_argument("--sample-rate", type=float, default=env_number("FAULTLENS_HISTORY_SAMPLE_RATE", 1.0, on_bad="raise"),
                   help="history: fraction of gpu/host samples stored (default 1.0)")
    add_engine_arguments(parser)  # the same engine flags as `faultlens diagnose`
    add_policy_arguments(parser)  # the same remediation flags as `faultlens remediate`
    from faultlens.streams import metrics

    metrics.add_metrics_argument(parser)
    add_kafka_arguments(parser)


def _consumers(args: argparse.Namespace) -> tuple[str, ...]:
    skip = {name for name in ("diagnose", "remediate", "history") if getattr(args, f"no_{name}")}
    return tuple(n for n in ("diagnose", "remediate", "history") if n not in skip)


def _signing_key(args: argparse.Namespace, acting: bool):
    """The signing key and where its public half is, for the ready line: (key, "PATH" or "ephemeral")."""
    from faultlens.commands.remediate import command_signing_key
    from faultlens.events.home import EPHEMERAL_VERIFY_KEY, faultlens_home
    from faultlens.events.signing import SIGNING_KEY_ENV

    given = args.signing_key or os.environ.get(SIGNING_KEY_ENV)
    key = command_signing_key(args, acting=acting, ephemeral_when_acting=True)
    if given:
        return key, str(given)
    if not acting:
        return key, "ephemeral"
    # Public, so overwriting it each run is harmless; receivers started with it obey this run only.
    public = faultlens_home() / EPHEMERAL_VERIFY_KEY
    public.write_bytes(key.public_pem())
    log.warning("acting with an ephemeral signing key: receivers must be given --verify-key %s", public)
    return key, f"ephemeral (public key {public})"


def run(args: argparse.Namespace) -> int:
    from faultlens.commands.remediate import build_actuator, decision_log_path, policy_configs, state_file_path
    from faultlens.diagnosis.edge.consumer import GROUP as DIAGNOSE_GROUP
    from faultlens.engine_flags import engine_config
    from faultlens.events.home import faultlens_home
    from faultlens.history.schema import HistoryError, default_db_path
    from faultlens.pipeline import Pipeline, PipelineOptions, suffixed
    from faultlens.remediation.safety import BREAKER_FILE
    from faultlens.streams.broker import BrokerError
    from faultlens.streams.connect import connected
    from faultlens.streams.lease import Lease, await_lease

    consumers = _consumers(args)
    if not consumers:
        print("faultlens up: every consumer is switched off", file=sys.stderr)
        return 2
    try:
        policy, safety = policy_configs(args)
        act_on = set(policy.act_on)
        signing_key, key_source = _signing_key(
            args, bool(act_on or args.act_on_all) and not args.dry_run and "remediate" in consumers)
        actuator = build_actuator(args) if "remediate" in consumers else None
    except (ValueError, OSError) as exc:
        print(f"faultlens up: {exc}", file=sys.stderr)
        return 2
    db = (args.db or default_db_path()) if "history" in consumers else None
    options = PipelineOptions(
        signing_key=signing_key, consumers=consumers, db=db, history_sample_rate=args.sample_rate,
        policy=policy, safety=safety, breaker_file=faultlens_home() / BREAKER_FILE,
        remediation_state_file=state_file_path(args), decision_log=decision_log_path(args),
        engine=engine_config(args), group_suffix=args.group_suffix,
        actuator=actuator, requeue_on_evict=not args.no_requeue_on_evict,
        fleet_topic=getattr(args, "fleet_topic", False),
    )

    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        # Without a bootstrap `up` starts the machine's broker and registers it, so a `collect` or
        # `replay` started beside it publishes where it reads; connected() stops (and unregisters)
        # it when the block ends: after every consumer closed.
        with connected(args, start_broker=True) as settings:
            # The diagnose consumer judges a job from all of its telemetry: one active member per
            # group, as `faultlens diagnose` (streams/lease.py). A second `up` (or a stage-all
            # `diagnose` of the same group) stands by, consuming nothing, until this one leaves.
            lease = Lease(settings, suffixed(DIAGNOSE_GROUP, args.group_suffix)) if "diagnose" in consumers else None
            try:
                if lease is not None:
                    if not await_lease(lease, None, stop):
                        print(json.dumps({"event": "stopped", "standby": True}), flush=True)
                        return 0
                    lease.watch(stop.set)
                try:
                    pipeline = Pipeline(settings, options).build()
                except (ValueError, HistoryError, OSError) as exc:
                    print(f"faultlens up: {exc}", file=sys.stderr)
                    return 1
                code = _serve(pipeline, settings, stop, args, consumers, db, act_on,
                              {"signing_key_id": signing_key.key_id, "signing_key": key_source})
                return 3 if lease is not None and lease.lost.is_set() else code
            finally:
                if lease is not None:
                    lease.release()
    except (ValueError, BrokerError) as exc:
        print(f"faultlens up: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve(pipeline, settings, stop: threading.Event, args: argparse.Namespace, consumers, db, act_on,
           key: dict) -> int:
    from faultlens.streams import metrics

    pipeline.start()
    metrics.serve(args.metrics_port)
    if pipeline.wait_ready():
        print(json.dumps({"event": "ready", "bootstrap": settings.bootstrap, "consumers": list(consumers),
                          "db": str(db) if db else None, "metrics_port": args.metrics_port or None,
                          "act_on": sorted(act_on), "act_on_all": args.act_on_all, "dry_run": args.dry_run, **key}),
              flush=True)
    while not (stop.wait(0.5) or pipeline.failed.is_set()):
        pass
    log.info("stopping: %s", "a consumer failed" if pipeline.failed.is_set() else "signal")
    summary = pipeline.shutdown()
    print(json.dumps({"event": "stopped", "consumers": summary}, default=str), flush=True)
    return 1 if pipeline.failed.is_set() else 0
