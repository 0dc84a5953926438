"""faultlens run: torchrun, with the job's signed commands obeyed (trainer_hooks.elastic_run)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path

from faultlens.events.command_memory import STATE_DIR_ENV, CommandMemory, default_state_dir, memory_file
from faultlens.events.command_screen import CommandScreen
from faultlens.events.signing import VERIFY_KEY_ENV, load_verify_keys, verify_key_paths
from faultlens.streams.broker import answers
from faultlens.streams.command_listener import CommandListener
from faultlens.streams.config import add_kafka_arguments
from faultlens.streams.connect import connected
from faultlens.trainer_hooks.exit_codes import EVICTED, STOPPED
from faultlens.trainer_hooks.run_heartbeat import RunHeartbeat

log = logging.getLogger(__name__)

HELP = "launch a training job as torchrun does, obeying faultlens's signed restart, rollback, evict and stop commands"
DESCRIPTION = """\
A drop-in for torchrun: the same arguments (--nnodes, --nproc-per-node, --rdzv-backend,
--rdzv-endpoint, --rdzv-id, --node-rank, --max-restarts, --standalone, the script and its
arguments ...), torch.distributed.run's own parser and elastic agent, plus the faultlens options
below (give them before the script). Run one per node, as torchrun:

  faultlens run --job my-job --bootstrap kafka-1:9093 --verify-key /etc/faultlens/command.pub \\
      --nnodes 1:64 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint head:29400 --rdzv-id my-job \\
      train.py --config big.yaml

Every worker gets the trainer hook's environment (FAULTLENS_JOB, FAULTLENS_NODE, FAULTLENS_NODES,
FAULTLENS_BOOTSTRAP, FAULTLENS_ATTEMPT, FAULTLENS_RESUME: latest or rollback, FAULTLENS_CHECKPOINT
when a command names one, FAULTLENS_VERIFY_KEY, FAULTLENS_STATE_DIR). The agent reads the job's
commands: restart / reattempt / rollback, and an evict of other nodes, restart the workers in place
(a new rendezvous round without the evicted nodes; the workers' hooks exit at a step boundary
first); an evict of this node ends this agent with exit code 75 (trainer_hooks/exit_codes.py:
requeue the job elsewhere), the others go on; stop ends the job with 79. A worker crash waits
--crash-wait seconds for the remediator's command (longer while it runs stop-time checks), then
restarts as torchrun would (counted against --max-restarts; commands' restarts are not).
Restarts and the job's end are published as `job`/`restart` and `job`/`end` (docs/events.md) by
the round's first node, and printed as JSON lines on stdout. Exit codes: 0 finished, 1 restarts
ran out (torch's error report above it), 2 bad arguments or a missing extra, 75 evicted,
79 stopped, 128+N a signal. More: docs/integrations.md."""


USAGE = "faultlens run [faultlens options] [torchrun options] SCRIPT [SCRIPT ARGS ...]   (every option: faultlens run --help)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from torch.distributed.run import get_args_parser

    # An error (a missing script, a typo) says what is wrong under two lines, not torchrun's 40-line usage.
    parser.usage = USAGE
    g = parser.add_argument_group("faultlens (before the training script)")
    g.add_argument("--job", default=None,
                   help="the job's id in faultlens (default: FAULTLENS_JOB, SLURM_JOB_ID, then --rdzv-id)")
    g.add_argument("--node-name", default=None,
                   help="this node's name, as the node agent and the scheduler call it (default: FAULTLENS_NODE, "
                        "then the host name); two agents on one machine need two names")
    g.add_argument("--verify-key", action="append", default=None, metavar="PEM",
                   help=f"public key commands must be signed with (repeatable; else {VERIFY_KEY_ENV}); passed on to the workers")
    g.add_argument("--state-dir", type=Path, default=None,
                   help=f"where handled command ids are kept across restarts (else {STATE_DIR_ENV}, else $FAULTLENS_HOME)")
    g.add_argument("--crash-wait", type=float, default=60.0,
                   help="seconds to wait for a command after a worker crash before restarting as torchrun would (default 60)")
    g.add_argument("--command-wait", type=float, default=10.0,
                   help="seconds to wait for the command behind a worker's command exit code (default 10)")
    g.add_argument("--heartbeat-interval", type=float, default=5.0,
                   help="seconds between this node's heartbeats, with its live workers' pids, so hangs are told "
                        "with no node agent (default 5; 0: none, the node agent beats)")
    g.add_argument("--grace", type=float, default=10.0,
                   help="seconds the workers get to exit on their own at a step boundary on a command (default 10)")
    g.add_argument("--hang-floor", type=float, default=None, metavar="S",
                   help="for the `faultlens up` a single-machine run with no broker starts for itself: never call a "
                        "stall shorter than S seconds a hang (its diagnosis engine's --hang-floor; default its own, "
                        "60 or FAULTLENS_HANG_FLOOR_S). An operator side of your own takes it on its own command line")
    add_kafka_arguments(parser)
    torchrun = parser.add_argument_group("torchrun (torch.distributed.run's own arguments)")
    for action in get_args_parser()._actions:
        if not isinstance(action, argparse._HelpAction):
            torchrun._add_action(action)


def _job(args: argparse.Namespace) -> str | None:
    rdzv_id = args.rdzv_id if args.rdzv_id and args.rdzv_id != "none" else None
    return args.job or os.environ.get("FAULTLENS_JOB") or os.environ.get("SLURM_JOB_ID") or rdzv_id


def _missing_script(args: argparse.Namespace) -> str | None:
    """Why the training script cannot run, when that is plain before any worker starts: a file
    that is not there (every worker would exit 2 with "can't open file", and the crash would wait
    for a verdict nobody can give)."""
    if getattr(args, "module", False) or getattr(args, "no_python", False):
        return None
    script = Path(args.training_script)
    if not script.is_file():
        return f"training script {args.training_script!r}: no such file"
    return None


def run(args: argparse.Namespace) -> int:
    import torch.distributed.run as torchrun

    from faultlens.trainer_hooks.elastic_run import JobSide

    job = _job(args)
    if not job:
        print("faultlens run: name the job: --job, FAULTLENS_JOB, SLURM_JOB_ID or --rdzv-id", file=sys.stderr)
        return 2
    missing = _missing_script(args)
    if missing:
        print(f"faultlens run: {missing}", file=sys.stderr)  # as torchrun fails: at once, before any worker
        return 2
    operator = _local_operator(args, job)
    try:
        return _run_job(torchrun, JobSide, args, job)
    finally:
        if operator is not None:
            _report(operator, job)


def _local_operator(args: argparse.Namespace, job: str):
    """`faultlens up` for this job, when it is a single-machine job with no broker given, set or
    running here (trainer_hooks/local_operator.py); None otherwise, or when it would not start."""
    from faultlens.events.home import faultlens_home
    from faultlens.streams.broker import running_embedded
    from faultlens.streams.config import KafkaSettings
    from faultlens.trainer_hooks.local_operator import LocalOperator, single_machine

    engine_flags = ["--hang-floor", str(args.hang_floor)] if args.hang_floor is not None else []
    if KafkaSettings.from_args(args).bootstrap or running_embedded() or not single_machine(args.nnodes, args.standalone):
        # A broker is given or running (an operator side is there), or other machines could not find
        # one of ours (connecting says so, as for any command).
        if engine_flags:
            print("faultlens run: --hang-floor is for the operator side a run starts for itself; this run uses "
                  "a broker's: give it to that side's `faultlens up` or `faultlens diagnose`", file=sys.stderr)
        return None
    operator = LocalOperator(job, faultlens_home() / f"run-{job}-up.log", engine_flags)
    print(f"faultlens run: no broker given or running here: starting `faultlens up --act-on {job}` for this job "
          f"(its log: {operator.log_path})", file=sys.stderr)
    ready = operator.start()
    if ready is None:
        print(f"faultlens run: faultlens up did not start (its log: {operator.log_path})", file=sys.stderr)
        return None
    args.bootstrap = ready["bootstrap"]
    if not args.verify_key and not os.environ.get(VERIFY_KEY_ENV) and operator.verify_key:
        args.verify_key = [operator.verify_key]
    return operator


def _report(operator, job: str) -> None:
    """Stop the job's own `up` (the history is written, the broker stops) and say where the
    history and its HTML report are."""
    import subprocess

    db = operator.stop()
    if not db:
        return
    html = Path(db).with_name(f"run-{job}-report.html")
    made = subprocess.run([sys.executable, "-m", "faultlens", "report", "--db", db, "--html", str(html), "--json"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    where = f"report: {html.resolve().as_uri()}" if made.returncode == 0 else f"report: faultlens report --db {db}"
    print(f"faultlens run: the job's history: {db}; {where}", file=sys.stderr)


def _run_job(torchrun, JobSide, args: argparse.Namespace, job: str) -> int:
    node = args.node_name or os.environ.get("FAULTLENS_NODE") or socket.gethostname()
    try:
        keys = load_verify_keys(args.verify_key)
        key_paths = tuple(str(Path(p).resolve()) for p in verify_key_paths(args.verify_key))
    except ValueError as exc:
        print(f"faultlens run: {exc}", file=sys.stderr)
        return 2
    if not log.isEnabledFor(logging.DEBUG):
        # kafka-python logs every failed reconnect at ERROR while a broker is away; the agent says
        # once what that means for the job (the command listener and the outbox warn).
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    state_dir = args.state_dir or (Path(os.environ[STATE_DIR_ENV]) if os.environ.get(STATE_DIR_ENV) else None)
    try:
        with connected(args, create_topics=False) as settings:
            side = JobSide(job=job, node=node, settings=settings, verify_key_paths=key_paths, state_dir=state_dir,
                           crash_wait=args.crash_wait, command_wait=args.command_wait, grace=args.grace,
                           parser_factory=_trainer_log_parser)
            memory = CommandMemory(memory_file(state_dir or default_state_dir(), "run", job, node))
            listener = CommandListener(settings, CommandScreen(keys, job, memory=memory), side.inbox.put)
            listener.start()
            # The operator side never holds the job back: with no broker it starts at once, and
            # commands are read once one answers (the workers' telemetry is spooled meanwhile).
            if not answers(settings.bootstrap or "", 1.0):
                log.warning("no broker answers at %s: training starts anyway; commands are obeyed once it does",
                            settings.bootstrap)
            elif not listener.ready.wait(30):
                log.error("command listener not ready after 30 s; starting the job, commands will be read once it is")
            beats = None
            if args.heartbeat_interval > 0:
                beats = RunHeartbeat(job=job, node=node, interval_s=args.heartbeat_interval, pids=lambda: side.pids,
                                     send=side.send)
                beats.start()
            try:
                return _launch(torchrun, args, side)
            finally:
                if beats is not None:
                    beats.stop()
                listener.stop()
                if side.producer is not None:
                    side.producer.close()
    except ValueError as exc:
        print(f"faultlens run: {exc}", file=sys.stderr)
        return 2


def _trainer_log_parser():
    """A fresh parser of the node agent's for torchrun's output, for a failed worker's last words
    (trainer_hooks/worker_exits.py). parsing is imported only once a worker has failed: never
    in a job that runs clean, never in a training loop."""
    from faultlens.parsing.registry import parser_for

    return parser_for("nccl", None)


def _launch(torchrun, args: argparse.Namespace, side) -> int:
    """torchrun's own run() under the faultlens agent; the job's end, published once; the exit code."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from faultlens.trainer_hooks.elastic_run import Evicted, Stopped, faultlens_agent

    try:
        with faultlens_agent(side):
            torchrun.run(args)
    except Evicted as exc:
        side.emit({"event": "evicted", "command_id": exc.command.id if exc.command else None, "exit": EVICTED})
        return EVICTED
    except Stopped as exc:
        side.end("stopped", exc.command)
        return STOPPED
    except ChildFailedError as exc:
        print(exc.format_msg(), file=sys.stderr)
        side.end("gave_up")
        return 1
    except SignalException as exc:
        side.end("cancelled")
        return 128 + int(exc.sigval)
    side.end("finished")
    return 0
