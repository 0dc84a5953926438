"""faultlens collect: run the node agent (NVML, kernel log, trainer logs, heartbeat, stack capture)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from faultlens.collectors.agent import Agent, AgentConfig
from faultlens.collectors.agent_health import gauges as health_gauges
from faultlens.collectors.checks.suite import ChecksConfig
from faultlens.collectors.log_source import LogSource
from faultlens.collectors.spool import SpoolBusy
from faultlens.events.command_memory import STATE_DIR_ENV, default_state_dir, memory_file
from faultlens.events.env_number import env_number
from faultlens.events.home import faultlens_home
from faultlens.events.signing import VERIFY_KEY_ENV, load_verify_keys
from faultlens.parsing.rules import RuleError, load
from faultlens.streams import metrics
from faultlens.streams.broker import answers
from faultlens.streams.config import add_kafka_arguments
from faultlens.streams.connect import connected

log = logging.getLogger(__name__)

HELP = "run the node agent: publish GPU, kernel, trainer-log telemetry and heartbeats; dump stacks on command"
DESCRIPTION = """\
Runs on every node of a training job. Each source runs in its own thread; one that fails is
reported in the heartbeat's `sources` and the others go on:

  nvml       one gpu/sample per --interval for every GPU, gpu/xid from NVML events, gpu/lost
  net        one net/sample per --net-interval: every RDMA port's state, rate and counter rates
             (/sys/class/infiniband, plus `ethtool -S` for RoCE ports where ethtool is installed)
  kernel     /dev/kmsg (or --kernel-log FILE, or `dmesg --follow`) parsed → telemetry.kernel
  trainer    the trainer's log files (--trainer-log, globs, rotation-safe) parsed → telemetry.nccl
  heartbeat  heartbeat/beat every --heartbeat-interval with training pids, source statuses and the
             agent's own health (sampler lag, last good NVML call, spool depth, drops, follower
             positions, and what it cannot see: docs/agent.md); also on --metrics-port
  stacks     on a signed capture_stacks command: py-spy dump of every training process
             (needs the public key of `faultlens keys generate`: --verify-key / FAULTLENS_VERIFY_KEY;
             the ids of commands handled are kept in --state-dir, so a restart refuses duplicates)

Without --bootstrap (or FAULTLENS_BOOTSTRAP / --config) it uses the embedded broker that `faultlens up`,
`demo` or `broker` registered on this machine, and exits 1 saying so when there is none; it never
starts a broker of its own (nobody would read it). Given a broker that does not answer, it says so
on stderr (again every minute) and keeps spooling and retrying.
While the broker is unreachable, events go to a bounded spool (--spool-dir, --spool-max-mb) and
are sent in order when it is back; when full, the oldest GPU samples are dropped, never a fault.
A full disk or a read-only spool directory keeps the agent running (records wait in memory,
samples dropped first) and is said in the heartbeat. Every NVML call runs under --nvml-deadline;
repeated log lines (an Xid flood) go out once, then as one event per 5 s with a count.
Prints one JSON line when started and one with counters when stopped (Ctrl-C / SIGTERM, or
after --duration seconds)."""


def _env(name: str) -> str | None:
    return os.environ.get("FAULTLENS_" + name) or None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job", default=_env("JOB"), help="training job id (FAULTLENS_JOB; required)")
    parser.add_argument("--node", default=_env("NODE") or socket.gethostname(),
                        help="this node's name (FAULTLENS_NODE; default: the host name)")
    parser.add_argument("--interval", type=float, default=1.0, help="GPU sample interval in seconds (default 1)")
    parser.add_argument("--heartbeat-interval", type=float, default=5.0, help="heartbeat interval in seconds (default 5)")
    parser.add_argument("--duration", type=float, default=None,
                        help="stop by itself after this many seconds (default: run until Ctrl-C / SIGTERM)")
    g = parser.add_argument_group("sources")
    g.add_argument("--no-nvml", action="store_true", help="do not sample GPUs through NVML")
    g.add_argument("--nvml-deadline", type=float, default=env_number("FAULTLENS_NVML_DEADLINE", 10.0, on_bad="raise"),
                   help="seconds an NVML call may take (default 10, FAULTLENS_NVML_DEADLINE); a call past it is "
                        "given up and reported as gpu/unresponsive naming the GPU and the call")
    g.add_argument("--no-net", action="store_true", help="do not read RDMA port counters")
    g.add_argument("--net-interval", type=float, default=5.0,
                   help="RDMA port counter interval in seconds (default 5)")
    g.add_argument("--sysfs-root", default="/sys",
                   help="where sysfs is mounted (default /sys; a copy of a node's tree for tests)")
    g.add_argument("--kernel-log", metavar="FILE", help="follow this kernel log file instead of /dev/kmsg")
    g.add_argument("--no-kernel", action="store_true", help="do not follow the kernel log")
    g.add_argument("--kernel-from-start", action="store_true",
                   help="read the kernel ring buffer (or --kernel-log file) from its start, not its end")
    g.add_argument("--trainer-log", action="append", default=[], metavar="PATH",
                   help="a trainer / NCCL log file to follow; repeatable; globs allowed (quote them)")
    g.add_argument("--trainer-from-start", action="store_true",
                   help="read trainer logs that exist at start from their beginning (default: their end)")
    g.add_argument("--fabric-manager-log", metavar="FILE", default=_env("FABRIC_MANAGER_LOG") or "/var/log/fabricmanager.log",
                   help="follow NVIDIA fabric manager's log (NVSwitch errors; default /var/log/fabricmanager.log, "
                        "FAULTLENS_FABRIC_MANAGER_LOG; nothing happens while it does not exist)")
    g.add_argument("--no-fabric-manager", action="store_true", help="do not follow the fabric manager log")
    g.add_argument("--rules", action="append", default=[], metavar="FILE",
                   help="a TOML log-line catalogue of your own (format: parsing/rules.toml), tried after the shipped rules; repeatable")
    s = parser.add_argument_group("training processes and stack capture")
    s.add_argument("--launcher-pid", type=int, help="pid of the launcher (torchrun); its workers are the training processes")
    s.add_argument("--proc-pattern", metavar="REGEX", help="training processes are those whose command line matches")
    s.add_argument("--rank-env", default="RANK", help="environment variable holding a process's rank (default RANK)")
    s.add_argument("--verify-key", action="append", default=None, metavar="PEM",
                   help=f"public key commands must be signed with (repeatable during a key rollover; else "
                        f"{VERIFY_KEY_ENV}, comma-separated); without one, stack capture is off")
    s.add_argument("--state-dir", type=Path, default=None,
                   help=f"where the ids of handled commands are kept across restarts (else {STATE_DIR_ENV}, "
                        "else $FAULTLENS_HOME)")
    s.add_argument("--secret-file", help=argparse.SUPPRESS)  # removed: said so instead of "unrecognized"
    s.add_argument("--dump-timeout", type=float, default=10.0, help="seconds per py-spy dump (default 10)")
    c = parser.add_argument_group("stop-time checks (run on a signed run_checks command)")
    c.add_argument("--check-path", action="append", default=[], metavar="DIR",
                   help="checkpoint / work folder that must have room and take a write (repeatable; default .)")
    c.add_argument("--check-min-free-gb", type=float, default=10.0, help="free space each path needs (default 10)")
    c.add_argument("--check-timeout", type=float, default=60.0,
                   help="seconds each check may take (default 60; the collective gets 60 more to start its ranks)")
    o = parser.add_argument_group("broker outages")
    o.add_argument("--spool-dir", default=_env("SPOOL_DIR"),
                   help="where to spool events while the broker is away (default $FAULTLENS_HOME/spool/JOB-NODE)")
    o.add_argument("--spool-max-mb", type=float, default=env_number("FAULTLENS_SPOOL_MAX_MB", 256.0, on_bad="raise"),
                   help="spool bound in MB (default 256); when full, the oldest GPU samples go first")
    o.add_argument("--no-create-topics", action="store_true", help="do not create missing telemetry topics")
    metrics.add_metrics_argument(parser)
    add_kafka_arguments(parser)


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    if not args.job:
        raise ValueError("--job (or FAULTLENS_JOB) is required")
    if args.interval <= 0 or args.heartbeat_interval <= 0 or args.net_interval <= 0 or args.nvml_deadline <= 0:
        raise ValueError("--interval, --heartbeat-interval, --net-interval and --nvml-deadline must be positive")
    if args.duration is not None and args.duration <= 0:
        raise ValueError("--duration must be positive")
    if args.launcher_pid is not None and args.proc_pattern:
        raise ValueError("give --launcher-pid or --proc-pattern, not both")
    if args.secret_file:
        raise ValueError("--secret-file: shared-secret (HMAC) commands were removed; pass the public key "
                         "from `faultlens keys generate` with --verify-key")
    keys, keys_error = None, None
    try:
        keys = load_verify_keys(args.verify_key)
    except ValueError as exc:
        keys_error = str(exc)
    state_dir = args.state_dir or default_state_dir()
    spool_dir = Path(args.spool_dir) if args.spool_dir else faultlens_home() / "spool" / f"{args.job}-{args.node}"
    try:
        line_rules = load(args.rules) if args.rules else None
    except RuleError as exc:
        raise SystemExit(f"faultlens collect: {exc}") from None
    return AgentConfig(
        job=args.job, node=args.node, interval_s=args.interval, heartbeat_interval_s=args.heartbeat_interval,
        kernel=not args.no_kernel, kernel_log=args.kernel_log, kernel_from_start=args.kernel_from_start,
        trainer_logs=list(args.trainer_log), trainer_from_start=args.trainer_from_start, nvml=not args.no_nvml,
        nvml_deadline_s=args.nvml_deadline,
        fabric_manager_log=None if args.no_fabric_manager else args.fabric_manager_log, line_rules=line_rules,
        launcher_pid=args.launcher_pid, proc_pattern=args.proc_pattern, rank_env=args.rank_env,
        verify_keys=keys, verify_keys_error=keys_error,
        command_memory_file=memory_file(state_dir, "agent", args.job, args.node), spool_dir=spool_dir, spool_max_mb=args.spool_max_mb,
        create_topics=not args.no_create_topics, dump_timeout_s=args.dump_timeout,
        checks=ChecksConfig(paths=tuple(args.check_path) or (".",), min_free_gb=args.check_min_free_gb,
                            timeout_s=args.check_timeout, nvml=None),
        net=not args.no_net, net_interval_s=args.net_interval, sysfs_root=args.sysfs_root,
    )


def _missing_logs(config: AgentConfig) -> list[str]:
    """The logs named that are not there yet. They are followed once they appear (a trainer that has
    not started); said at the start so that a mistyped path does not pass for a quiet machine."""
    import glob

    out = []
    if config.kernel and config.kernel_log and not os.path.exists(config.kernel_log):
        out.append(f"kernel log {config.kernel_log} does not exist (yet): followed once it appears")
    out += [f"trainer log {pattern} matches no file (yet): files that appear are followed"
            for pattern in config.trainer_logs if not glob.glob(pattern)]
    return out


UNREACHABLE_REMINDER_S = 60.0


def _wait_saying_when_unreachable(agent, bootstrap: str, stop: threading.Event, duration: float | None) -> None:
    """Until stopped; while the broker does not answer, say so on stderr at once and every minute.

    An agent whose broker is away must not look healthy: its events wait in the spool, and a
    person starting it by hand should see that from the first line, not from a WARNING later.
    """
    deadline = None if duration is None else time.monotonic() + duration
    said_at = None
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        if not agent.publisher.connected and not answers(bootstrap, 0.5):
            now = time.monotonic()
            if said_at is None or now - said_at >= UNREACHABLE_REMINDER_S:
                print(f"faultlens collect: no broker answers at {bootstrap}: spooling events in {agent.spool.path} "
                      f"({len(agent.spool)} waiting) and retrying every {agent.publisher.retry_s:.0f} s; they are "
                      "sent in order once it answers", file=sys.stderr, flush=True)
                said_at = now
        elif said_at is not None:
            print(f"faultlens collect: the broker at {bootstrap} answers; sending the spool", file=sys.stderr, flush=True)
            said_at = None
        if stop.wait(min(1.0, left) if left is not None else 1.0):
            return


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"faultlens collect: {exc}", file=sys.stderr)
        return 2
    for line in _missing_logs(config):
        print(f"faultlens collect: {line}", file=sys.stderr, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # The agent creates topics itself once the broker answers: it must start (and spool) while
    # Kafka is down, so nothing here may wait for the broker.
    with connected(args, create_topics=False) as settings:
        try:
            agent = Agent(config, settings)
        except SpoolBusy as exc:
            print(f"faultlens collect: {exc}", file=sys.stderr)
            return 1
        try:
            agent.start()
            metrics.register_gauges("collect", lambda: {
                "agent_published": agent.publisher.stats.published, "agent_delivered": agent.publisher.stats.delivered,
                "agent_spooled": agent.publisher.stats.spooled, "agent_spool_waiting": len(agent.spool),
                "agent_lost": agent.publisher.stats.lost, **health_gauges(agent.health())})
            metrics.serve(args.metrics_port)
            print(json.dumps({"event": "started", "job": config.job, "node": config.node,
                              "bootstrap": settings.bootstrap, "sources": [s.name for s in agent.sources],
                              "spool": str(agent.spool.path),
                              "verify_key_ids": list(config.verify_keys.ids) if config.verify_keys else [],
                              "command_memory_file": str(config.command_memory_file)}), flush=True)
            _wait_saying_when_unreachable(agent, settings.address(), stop, args.duration)
            log.info("stopping")
        finally:
            agent.stop()
    p = agent.publisher.stats
    print(json.dumps({"event": "stopped", "published": p.published, "delivered": p.delivered, "spooled": p.spooled,
                      "spool_waiting": len(agent.spool),
                      "spool_dropped": agent.spool.stats.dropped, "lost": p.lost, "sources": agent.statuses(),
                      "logs": {s.name: s.counters() for s in agent.sources if isinstance(s, LogSource)}}), flush=True)
    return 0
