"""faultlens remediate: turn diagnoses into signed commands, safely."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from faultlens.events import topics
from faultlens.events.command import MAX_LIFETIME_S
from faultlens.events.env_number import env_number
from faultlens.events.home import faultlens_home
from faultlens.events.signing import SIGNING_KEY_ENV, SigningKey, ephemeral_signing_key, load_signing_key
from faultlens.remediation.actuators import ACTUATOR_ENV, ACTUATORS, COMMAND_ENV, Actuator, ActuatorSettings, make_actuator
from faultlens.remediation.consumer import DIAGNOSES_TOPIC, GROUP, JOBS_TOPIC, build_policy, remediate_consumer
from faultlens.remediation.decision import PolicyConfig
from faultlens.remediation.fleet_log import FleetLog
from faultlens.remediation.lemon import DAY_S, LemonConfig, parse_rules
from faultlens.remediation.safety import BREAKER_FILE, CircuitBreaker, SafetyConfig
from faultlens.remediation.state import STATE_ENV, STATE_FILE
from faultlens.remediation.state_log import StateLog
from faultlens.streams import metrics
from faultlens.streams.config import add_kafka_arguments
from faultlens.streams.connect import connected

log = logging.getLogger(__name__)

HELP = "run the remediation consumer: diagnoses → escalation ladder → signed commands"
DESCRIPTION = """\
Reads `diagnoses` (consumer group faultlens-remediate) and the job topologies, climbs each job's
escalation ladder (docs/design.md §4) and prints every decision as one JSON line on stdout; the same
lines go to the decision log (default $FAULTLENS_HOME/remediation-decisions.jsonl).

Observe-only by default: nothing is sent to `commands` until a job is switched on with --act-on JOB
(repeatable, or FAULTLENS_ACT_ON=job1,job2) or --act-on-all. --dry-run decides and signs but sends
nothing. Safety: caps on evictions per window and per job share, dedup of repeated diagnoses, and a
circuit breaker that blocks all evictions once too many nodes went in one window; it stays open
across restarts until `faultlens remediate --reset`. Each job's escalation ladder and the warm
standbys it handed out also survive a restart: they are saved after every decision that changed
them to --state-file (default $FAULTLENS_HOME/remediation-state.json; one file per remediation
consumer); an unreadable file is moved aside with an ERROR and remediation starts with no state.

With --actuator slurm|kubernetes|script the consumer also acts on the scheduler, for jobs it acts
on: an evict drains (Slurm) or cordons and taints (Kubernetes) the machines, naming the diagnosis
and fault, then requeues the job (scontrol requeue, or deletes its pods on those machines); a
decision whose params carry `bring_back` resumes / uncordons machines that passed their checks
(by hand: `faultlens nodes resume NODE --actuator slurm`). Jobs in observe-only or dry-run mode
only record what would have been done. Every operation and its outcome (ok, error text, skipped)
is in the decision line ("actions") and on the `actions` topic, which the history stores; a
failing scheduler is logged and recorded, never fatal. Only this consumer holds the scheduler
credentials (SLURM_CONF + munge, or a kubeconfig / service account); nodes never do.

Commands are signed with an Ed25519 private key (--signing-key or FAULTLENS_SIGNING_KEY; make a
pair with `faultlens keys generate --out DIR`); agents, hooks and launchers verify them with the
public key. Acting needs the key; observe-only without one signs with an ephemeral key, since
nothing it signs is sent."""


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """What to act on, safety, the standby pool, the secret and the decision log: the flags of
    every command that runs remediation (`remediate`, `up`)."""
    g = parser.add_argument_group("what to act on")
    g.add_argument("--act-on", action="append", default=None, metavar="JOB",
                   help="send commands for this job (repeatable, or FAULTLENS_ACT_ON=job1,job2; default: observe only)")
    g.add_argument("--act-on-all", action="store_true", default=os.environ.get("FAULTLENS_ACT_ON_ALL") == "1",
                   help="send commands for every job")
    g.add_argument("--dry-run", action="store_true", help="decide and log commands, send nothing")
    s = parser.add_argument_group("safety")
    s.add_argument("--window", type=float, default=env_number("FAULTLENS_EVICT_WINDOW_S", 600.0, on_bad="raise"),
                   help="seconds of the eviction window (default 600)")
    s.add_argument("--max-evictions", type=int, default=int(env_number("FAULTLENS_MAX_EVICTIONS", 8, on_bad="raise")),
                   help="nodes evicted per window over all jobs (default 8)")
    s.add_argument("--max-job-share", type=float, default=env_number("FAULTLENS_MAX_JOB_SHARE", 0.10, on_bad="raise"),
                   help="share of one job's nodes evicted per window, at least one node (default 0.10)")
    s.add_argument("--breaker-share", type=float, default=env_number("FAULTLENS_BREAKER_SHARE", 0.20, on_bad="raise"),
                   help="share of all known nodes evicted per window that opens the breaker (default 0.20)")
    s.add_argument("--dedup", type=float, default=300.0,
                   help="seconds in which a repeated diagnosis makes no second command (default 300)")
    s.add_argument("--min-confidence", type=float, default=0.5, help="least confidence to evict (default 0.5)")
    s.add_argument("--ttl", type=float, default=300.0, help="seconds a command stays valid (default 300)")
    s.add_argument("--settle", type=float, default=30.0,
                   help="seconds after an escalation in which more crash reports count as the same incident")
    c = parser.add_argument_group("stop-time diagnosis")
    c.add_argument("--stop-checks", action="store_true", default=os.environ.get("FAULTLENS_STOP_CHECKS") == "1",
                   help="on a crash or NaN with no clear culprit, send run_checks to the job's node agents and "
                        "wait for their results before the ladder's first rung; evict only machines that fail")
    c.add_argument("--checks-wait", type=float, default=420.0,
                   help="seconds to wait for check results per ask (silent machines are asked twice, then "
                        "reported, never evicted for silence; default 420, above the agents' five checks under "
                        "their default 60 s --check-timeout)")
    p = parser.add_argument_group("warm standby pool")
    p.add_argument("--standby", default=os.environ.get("FAULTLENS_STANDBY", ""),
                   help="comma-separated spare hosts handed to evictions (default: named per job)")
    p.add_argument("--failure-rate", type=float, default=0.0012, help="per-node daily failure rate (default 0.0012)")
    p.add_argument("--replacement-days", type=float, default=1.0, help="replacement window in days (default 1)")
    o = parser.add_argument_group("commands")
    o.add_argument("--signing-key", metavar="PEM",
                   help=f"Ed25519 private key that signs commands (else {SIGNING_KEY_ENV}; "
                        "from `faultlens keys generate`)")
    # The shared HMAC secret is gone; the flag stays only to say so instead of "unrecognized argument".
    o.add_argument("--secret-file", help=argparse.SUPPRESS)
    o.add_argument("--decision-log", type=Path,
                   help="JSON lines file of decisions (default $FAULTLENS_HOME/remediation-decisions.jsonl)")
    o.add_argument("--state-file", type=Path, default=Path(os.environ[STATE_ENV]) if os.environ.get(STATE_ENV) else None,
                   help=f"where each job's escalation ladder and handed-out standbys survive a restart, one file "
                        f"per remediation consumer (else {STATE_ENV}; default $FAULTLENS_HOME/{STATE_FILE})")
    o.add_argument("--state-topic", action="store_true",
                   default=os.environ.get("FAULTLENS_STATE_TOPIC", "") not in ("", "0"),
                   help="keep that state on the compacted topic remediation.state instead (FAULTLENS_STATE_TOPIC=1): "
                        "for more than one remediation member in a group, or no disk that outlives the pod; a "
                        "member given a job's partition takes over its ladder where the last one left it")
    add_lemon_arguments(parser)
    add_actuator_arguments(parser)


def add_lemon_arguments(parser: argparse.ArgumentParser) -> None:
    """The fleet memory and its lemon policy (remediation.lemon, docs/fleet.md)."""
    env = os.environ.get
    f = parser.add_argument_group("fleet memory (machines that keep failing across jobs: docs/fleet.md)")
    f.add_argument("--fleet-topic", action=argparse.BooleanOptionalAction,
                   default=env("FAULTLENS_FLEET_TOPIC", "1") not in ("", "0"),
                   help="keep every machine's record on the compacted topic `fleet`, shared by all remediation "
                        "members and `faultlens nodes` (default on; --no-fleet-topic or FAULTLENS_FLEET_TOPIC=0: "
                        "in memory only, forgotten at exit)")
    f.add_argument("--no-lemons", action="store_true", default=env("FAULTLENS_LEMONS", "1") == "0",
                   help="record machines, never take a lemon out (FAULTLENS_LEMONS=0)")
    f.add_argument("--lemon-window-days", type=float, default=env_number("FAULTLENS_LEMON_WINDOW_DAYS", 7.0, on_bad="raise"),
                   help="days the lemon rules look back (default 7)")
    f.add_argument("--lemon-rules", default=env("FAULTLENS_LEMON_RULES", ""), metavar="CLASS=N[/DAYS],...",
                   help="per fault class: N of that class on one machine in the window (or DAYS) makes a lemon, "
                        "`culprit` counts it only towards --lemon-culprit-jobs, `off` never counts it. Defaults: "
                        "hardware classes 2, cuda_error / nccl_error / node_silent / job_hang / fail_slow culprit, "
                        "the rest (user_code, app_fault, nan_loss, host_oom, ...) off (FAULTLENS_LEMON_RULES)")
    f.add_argument("--lemon-failed-checks", type=int, default=int(env_number("FAULTLENS_LEMON_FAILED_CHECKS", 2, on_bad="raise")),
                   help="failed stop-time checks in the window that make a lemon (default 2; 0: never)")
    f.add_argument("--lemon-culprit-jobs", type=int, default=int(env_number("FAULTLENS_LEMON_CULPRIT_JOBS", 2, on_bad="raise")),
                   help="incidents as the only culprit, each in a different job, that make a lemon (default 2; 0: never)")


def lemon_config(args: argparse.Namespace) -> LemonConfig:
    """The lemon policy the flags name; raises ValueError for a bad rule or number."""
    days = getattr(args, "lemon_window_days", 7.0)
    if not days > 0:
        raise ValueError(f"--lemon-window-days must be > 0, got {days}")
    failed, culprit = getattr(args, "lemon_failed_checks", 2), getattr(args, "lemon_culprit_jobs", 2)
    if failed < 0 or culprit < 0:
        raise ValueError("--lemon-failed-checks and --lemon-culprit-jobs must be >= 0")
    return LemonConfig(enabled=not getattr(args, "no_lemons", False), window_s=days * DAY_S,
                       rules=parse_rules(getattr(args, "lemon_rules", ""), days * DAY_S),
                       failed_checks=failed, culprit_jobs=culprit)


def add_actuator_arguments(parser: argparse.ArgumentParser) -> None:
    """How the remediation consumer acts on the scheduler (remediation.actuators)."""
    a = parser.add_argument_group("actuator (acts on the scheduler; only for jobs switched on with --act-on)")
    a.add_argument("--actuator", choices=ACTUATORS, default=os.environ.get(ACTUATOR_ENV) or "none",
                   help=f"none (default: commands only), slurm (scontrol/scancel), kubernetes (cordon, taint, "
                        f"delete pods) or script (--actuator-command); else {ACTUATOR_ENV}")
    a.add_argument("--actuator-command", default=os.environ.get(COMMAND_ENV, ""), metavar="CMD",
                   help=f"script actuator: run CMD (no shell) with each operation as JSON on stdin; else {COMMAND_ENV}")
    a.add_argument("--actuator-timeout", type=float, default=20.0,
                   help="seconds one scheduler call may take before it counts as failed (default 20)")
    a.add_argument("--no-requeue-on-evict", action="store_true",
                   help="take evicted machines out but leave requeueing the job to its launcher")
    a.add_argument("--slurm-requeue", choices=("requeue", "signal"), default="requeue",
                   help="slurm: `scontrol requeue` the job (default) or `scancel --signal` its steps")
    a.add_argument("--slurm-signal", default="USR1", help="slurm: the signal for --slurm-requeue signal (default USR1)")
    a.add_argument("--k8s-namespace", default=os.environ.get("FAULTLENS_K8S_NAMESPACE", "default"),
                   help="kubernetes: namespace of the jobs' pods (default 'default'; else FAULTLENS_K8S_NAMESPACE)")
    a.add_argument("--k8s-pod-selector", default="job-name={job}",
                   help="kubernetes: label selector of a job's pods, {job} is the job (default job-name={job})")
    a.add_argument("--kubeconfig", default=None,
                   help="kubernetes: kubeconfig file (default: in-cluster service account, else ~/.kube/config)")


def actuator_settings(args: argparse.Namespace) -> ActuatorSettings:
    return ActuatorSettings(
        kind=args.actuator, command=args.actuator_command, timeout_s=args.actuator_timeout,
        slurm_requeue=args.slurm_requeue, slurm_signal=args.slurm_signal, k8s_namespace=args.k8s_namespace,
        k8s_pod_selector=args.k8s_pod_selector, kubeconfig=args.kubeconfig,
        requeue_on_evict=not getattr(args, "no_requeue_on_evict", False))


def build_actuator(args: argparse.Namespace) -> Actuator:
    """The actuator the flags name; raises ValueError with what to fix."""
    return make_actuator(actuator_settings(args))


def policy_configs(args: argparse.Namespace) -> tuple[PolicyConfig, SafetyConfig]:
    """The policy and safety settings those flags name; raises ValueError for impossible ones."""
    act_on = set(args.act_on or [])
    act_on.update(j for j in os.environ.get("FAULTLENS_ACT_ON", "").split(",") if j)
    if args.ttl > MAX_LIFETIME_S:
        raise ValueError(f"--ttl {args.ttl:.0f}s: receivers refuse commands valid for over {MAX_LIFETIME_S:.0f}s")
    safety = SafetyConfig(args.window, args.max_evictions, args.max_job_share, args.breaker_share, args.dedup)
    policy = PolicyConfig(
        act_on=frozenset(act_on), act_on_all=args.act_on_all, dry_run=args.dry_run, ttl_s=args.ttl,
        min_confidence=args.min_confidence, settle_s=args.settle,
        standby_names=tuple(n for n in args.standby.split(",") if n),
        daily_failure_rate=args.failure_rate, standby_window_days=args.replacement_days,
        stop_checks=getattr(args, "stop_checks", False), checks_wait_s=getattr(args, "checks_wait", 420.0),
        lemon=lemon_config(args),
    )
    return policy, safety


def command_signing_key(args: argparse.Namespace, *, acting: bool, ephemeral_when_acting: bool = False) -> SigningKey:
    """The private key named by --signing-key / FAULTLENS_SIGNING_KEY; without one, an ephemeral
    key when nothing signed will be sent (or when ``ephemeral_when_acting``: `up` on a laptop).
    Raises ValueError with what to do."""
    if getattr(args, "secret_file", None):
        raise ValueError("--secret-file: shared-secret (HMAC) command signing was removed; make an Ed25519 pair "
                         "with `faultlens keys generate --out DIR` and pass --signing-key DIR/command-signing-key.pem")
    if args.signing_key or os.environ.get(SIGNING_KEY_ENV):
        return load_signing_key(args.signing_key)
    if not acting:
        return ephemeral_signing_key("observe-only: commands are signed but never sent")
    if not ephemeral_when_acting:
        return load_signing_key(None)  # raises: acting needs the key every receiver trusts
    return ephemeral_signing_key("no --signing-key: only receivers given its public key obey")


def decision_log_path(args: argparse.Namespace) -> Path:
    return args.decision_log or faultlens_home() / "remediation-decisions.jsonl"


def state_file_path(args: argparse.Namespace) -> Path:
    return args.state_file or faultlens_home() / STATE_FILE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_policy_arguments(parser)
    b = parser.add_argument_group("circuit breaker")
    b.add_argument("--reset", action="store_true", help="close the circuit breaker and exit")
    b.add_argument("--status", action="store_true", help="print the circuit breaker state as JSON and exit")
    o = parser.add_argument_group("run")
    o.add_argument("--group", default=GROUP, help=f"consumer group (default {GROUP})")
    o.add_argument("--idle-stop", type=float, default=None, help="exit after this many seconds without input")
    metrics.add_metrics_argument(parser)
    add_kafka_arguments(parser)


def _breaker() -> CircuitBreaker:
    return CircuitBreaker(faultlens_home() / BREAKER_FILE)


def run(args: argparse.Namespace) -> int:
    if args.reset:
        breaker = _breaker()
        was = breaker.reason
        breaker.reset()
        print(json.dumps({"breaker": "closed", "was": was or None}), flush=True)
        return 0
    if args.status:
        b = _breaker()
        print(json.dumps({"breaker": "open" if b.open else "closed", "reason": b.reason, "opened_at": b.opened_at}))
        return 0
    try:
        config, safety_config = policy_configs(args)
        signing_key = command_signing_key(args, acting=bool(config.act_on or config.act_on_all) and not config.dry_run)
        actuator = build_actuator(args)
    except (ValueError, OSError) as exc:
        print(f"faultlens remediate: {exc}", file=sys.stderr)
        return 2
    def emit(decision) -> None:
        print(json.dumps(decision.to_dict()), flush=True)

    with connected(args, [DIAGNOSES_TOPIC, JOBS_TOPIC, topics.COMMANDS, topics.DEAD_LETTER, topics.ACTIONS,
                          topics.REMEDIATION_STATE, topics.FLEET]) as settings:
        store = StateLog(settings) if args.state_topic else None
        fleet_store = FleetLog(settings) if args.fleet_topic else None
        policy = build_policy(signing_key, config, safety_config, faultlens_home() / BREAKER_FILE,
                              None if store else state_file_path(args), store=store, fleet_store=fleet_store)
        runner, _ = remediate_consumer(settings, policy, group=args.group, decision_log=decision_log_path(args),
                                       emit=emit, actuator=actuator, requeue_on_evict=not args.no_requeue_on_evict)
        metrics.register_runner("remediate", lambda: runner.stats)
        metrics.serve(args.metrics_port)
        try:
            stats = runner.run(idle_stop_s=args.idle_stop)
        finally:  # before an embedded broker goes: a client left open logs kafka ERRORs at the end
            for client in (store, fleet_store):
                if client is not None:
                    client.close()
        log.info("remediate stopped: %d records, %d commands, %d dead letters",
                 stats.records_in, stats.outputs - stats.dead_letters, stats.dead_letters)
    return 0
