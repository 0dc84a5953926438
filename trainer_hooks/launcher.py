"""Runs a trainer as "nodes" of processes on one machine and restarts it the way commands say.

    python -m faultlens.trainer_hooks.launcher --job j1 --nodes 4 --procs-per-node 2 --standby s000,s001 \\
        -- --ckpt-dir /tmp/ck --steps 200

Each node is a name (n000, n001, ..., or ``--node-names``) whose processes share
FAULTLENS_NODE. The launcher listens to ``commands`` itself (job-level, every node) and watches
its children's exit codes (trainer_hooks.exit_codes): on evict it restarts the job without the
evicted nodes, replacing them with standbys (the command's ``replacements`` first, then
``--standby``: trainer_hooks.restart_plan); on restart / reattempt / rollback it restarts in place (rollback resumes from the
checkpoint before the last). A crash with no command is followed by a wait for one
(``--crash-wait``; a ``run_checks`` meanwhile, or one that came in while the crashing ranks were
still exiting, stretches it to the checks' own wait, for their verdict), then a restart in place.
Every restart is published as a `job`/`restart` event and printed as a JSON line on stdout; the
job's end (finished, stopped, cancelled by SIGTERM, or given up) as a `job`/`end` event, so that
its agents stopping next are not read as machines dying. With no broker it trains all the same
(trainer_hooks/outbox.py): those events are spooled until one answers, and commands are read once it does.

A restart with ``mode: dual_phase_replay`` first runs the plan's groups one by one
(trainer_hooks.reproduction: a few steps each, ``--replay-steps``, ``--replay-timeout``), publishes
which reproduced the fault, then waits ``--crash-wait`` for the verdict (an evict of the culprits)
before restarting.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

from faultlens.events.command import Command
from faultlens.events.command_memory import STATE_DIR_ENV, CommandMemory, default_state_dir, memory_file
from faultlens.events.command_screen import CommandScreen
from faultlens.events.envelope import Envelope
from faultlens.events.signing import VERIFY_KEY_ENV, VerifyKeys, load_verify_keys, verify_key_paths
from faultlens.streams.broker import answers
from faultlens.streams.command_listener import CommandListener
from faultlens.streams.config import KafkaSettings, add_kafka_arguments
from faultlens.streams.local_port import free_port
from faultlens.trainer_hooks.crash_wait import LEAVING_ACTIONS, checks_wait_s, evicts_none_of, wait_for_verdict
from faultlens.trainer_hooks.exit_codes import EXIT_ACTION, STOPPED
from faultlens.trainer_hooks.outbox import Outbox
from faultlens.trainer_hooks.outbox_voice import OutageVoice, client_threads, quiet_close
from faultlens.trainer_hooks.reproduction import run_reproduction
from faultlens.trainer_hooks.restart_plan import RestartPlan, plan_restart

log = logging.getLogger("faultlens.launcher")
OUTBOX_THREAD = "faultlens-launcher-outbox"


def node_names(args: argparse.Namespace) -> tuple[str, ...]:
    """The job's node names: ``--node-names`` if given, else n000, n001, ... Raises ValueError."""
    names = tuple(n.strip() for n in (getattr(args, "node_names", "") or "").split(",") if n.strip())
    if not names:
        return tuple(f"n{i:03d}" for i in range(args.nodes))
    if len(set(names)) != len(names):
        raise ValueError(f"--node-names: a name is given twice ({','.join(names)})")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m faultlens.trainer_hooks.launcher", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--job", default=os.environ.get("FAULTLENS_JOB", "job-0"), help="job id")
    p.add_argument("--nodes", type=int, default=2, help="number of nodes")
    p.add_argument("--node-names", default="",
                   help="comma-separated names of the nodes, instead of n000, n001, ... (--nodes of them): "
                        "the scheduler's host names, so that taking a machine out names the right one")
    p.add_argument("--procs-per-node", type=int, default=1, help="trainer processes per node")
    p.add_argument("--standby", default="", help="comma-separated spare node names (e.g. s000,s001)")
    p.add_argument("--trainer", default="faultlens.trainer_hooks.reference_trainer", help="python module to run")
    p.add_argument("--node-arg", default="--node",
                   help="flag that passes each process its node name on the command line ('' for none)")
    p.add_argument("--verify-key", action="append", default=None, metavar="PEM",
                   help=f"public key commands must be signed with (repeatable during a key rollover; else "
                        f"{VERIFY_KEY_ENV}, comma-separated); passed on to the trainers")
    p.add_argument("--state-dir", type=Path, default=None,
                   help=f"where handled command ids are kept across restarts (else {STATE_DIR_ENV}, else $FAULTLENS_HOME)")
    p.add_argument("--max-restarts", type=int, default=5, help="give up after this many restarts")
    p.add_argument("--grace", type=float, default=5.0, help="seconds children get to exit on their own")
    p.add_argument("--command-wait", type=float, default=10.0,
                   help="seconds to wait for the command behind a child's restart exit code")
    p.add_argument("--crash-wait", type=float, default=30.0, help="seconds to wait for a command after a crash")
    p.add_argument("--log-dir", type=Path, help="one log file per rank and attempt (default: inherit stderr)")
    p.add_argument("--replay-steps", type=int, default=20,
                   help="steps each dual-phase reproduction group runs from the latest checkpoint (default 20)")
    p.add_argument("--replay-timeout", type=float, default=300.0,
                   help="seconds a reproduction group may run; longer counts as a reproduced hang (default 300)")
    add_kafka_arguments(p)
    p.add_argument("trainer_args", nargs=argparse.REMAINDER, help="after --: arguments for the trainer")
    args = p.parse_args(argv)
    if args.trainer_args and args.trainer_args[0] == "--":
        args.trainer_args = args.trainer_args[1:]
    return args


class Launcher:
    def __init__(self, args: argparse.Namespace, settings: KafkaSettings, keys: VerifyKeys):
        self.args = args
        self.settings = settings
        self.job = args.job
        self.nodes = node_names(args)
        self.standby = tuple(s for s in args.standby.split(",") if s)
        self.commands: queue.Queue[Command] = queue.Queue()
        memory = CommandMemory(memory_file(args.state_dir or default_state_dir(), "launcher", self.job))
        # The trainer side's clients (as `faultlens run`'s): with no broker the job starts and trains at
        # once, its restarts and end are spooled, and commands are read once one answers.
        self.listener = CommandListener(settings, CommandScreen(keys, self.job, memory=memory), self.commands.put)
        self.producer = Outbox(settings, name=OUTBOX_THREAD)
        # Through an outage only the outbox and the listener say so, once: the clients' own reconnect lines
        # (~30 at ERROR in the seconds after a broker is killed) are DEBUG while it is lost (outbox_voice.py).
        producer = self.producer
        self.voice = OutageVoice(client_threads(settings.client_id, self.listener.name, OUTBOX_THREAD),
                                 settings.bootstrap, lambda: producer.down, settings.client_id,
                                 on_lost=self._say_broker_lost).install()
        self.procs: list[tuple[subprocess.Popen, str, int]] = []
        self.attempt = 0
        self._stopping = False

    def _say_broker_lost(self) -> None:
        # Once an outage, where the clients' reconnect lines would have been. Not while the listener
        # never reached a broker: the start said so ("no broker answers at ...").
        if self.listener.ready.is_set():
            log.warning("broker at %s lost: training goes on, commands are obeyed once it is back", self.settings.bootstrap)

    # --- children ---------------------------------------------------------------------------
    def spawn(self, resume: str, nodes: tuple[str, ...] | None = None, extra_env: dict[str, str] | None = None,
              label: str = "start") -> None:
        nodes = self.nodes if nodes is None else nodes
        ppn = self.args.procs_per_node
        world = len(nodes) * ppn
        port = free_port()
        self.procs = []
        for i, node in enumerate(nodes):
            for local in range(ppn):
                rank = i * ppn + local
                env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "FAULTLENS_JOB": self.job,
                       "FAULTLENS_NODE": node, "FAULTLENS_NODES": ",".join(nodes),
                       "FAULTLENS_BOOTSTRAP": self.settings.bootstrap, "FAULTLENS_ATTEMPT": str(self.attempt),
                       "FAULTLENS_RESUME": resume, **(extra_env or {})}
                out = None
                if self.args.log_dir:
                    self.args.log_dir.mkdir(parents=True, exist_ok=True)
                    tag = "" if label == "start" else f"-{label}-{'_'.join(nodes)}"
                    out = open(self.args.log_dir / f"attempt{self.attempt}{tag}-rank{rank}-{node}.log", "ab")
                node_arg = [self.args.node_arg, node] if self.args.node_arg else []
                proc = subprocess.Popen([sys.executable, "-m", self.args.trainer, *node_arg, *self.args.trainer_args],
                                        env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                        start_new_session=True)
                self.procs.append((proc, node, rank))
        self.emit({"event": label, "attempt": self.attempt, "nodes": list(nodes), "world_size": world,
                   "resume": resume, "pids": [p.pid for p, _, _ in self.procs]})

    def terminate(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.poll() is None for p, _, _ in self.procs):
            time.sleep(0.1)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p, _, _ in self.procs if p.poll() is None]
            for p in alive:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + 3
            while time.monotonic() < end and any(p.poll() is None for p in alive):
                time.sleep(0.1)

    # --- output -----------------------------------------------------------------------------
    def emit(self, obj: dict) -> None:
        print(json.dumps({"ts": time.time(), "job": self.job, **obj}), flush=True)

    def publish_restart(self, plan: RestartPlan, reason: str, command_id: str | None) -> None:
        self._publish("restart", {
            "reason": reason, "command_id": command_id, "nodes_out": list(plan.nodes_out),
            "nodes_in": list(plan.nodes_in), "attempt": self.attempt, "resume": plan.resume})

    def end(self, reason: str, line: dict, command_id: str | None = None) -> None:
        """Print the last line and publish ``job``/``end``: the job's nodes going quiet from now on
        is this end, not machines dying (diagnosis/rules/liveness.py), and no process is left to hang."""
        self.emit(line)
        try:
            self._publish("end", {"reason": reason, "attempt": self.attempt, "command_id": command_id,
                                  "nodes": list(self.nodes)})
        except Exception as exc:  # noqa: BLE001 - the job has ended whatever the broker says
            log.warning("could not publish the job's end: %s", exc)

    def _publish(self, kind: str, data: dict) -> None:
        self.producer.send_event(Envelope(ts=time.time(), job=self.job, node="-", source="job", kind=kind, data=data))
        self.producer.flush()

    # --- the loop ---------------------------------------------------------------------------
    def _wait_command(self, seconds: float) -> Command | None:
        try:
            return self.commands.get(timeout=seconds)
        except queue.Empty:
            return None

    def run(self) -> int:
        self.listener.start()
        if not answers(self.settings.bootstrap or "", 1.0):
            log.warning("no broker answers at %s: training starts anyway; commands are obeyed once it does",
                        self.settings.bootstrap)
        elif not self.listener.ready.wait(30):
            log.error("command listener not ready after 30 s; starting the job, commands will be read once it is")
        resume = "latest"
        while True:
            self.spawn(resume)
            outcome = self._watch()
            if outcome is None:
                self.end("finished", {"event": "done", "exit": 0, "attempt": self.attempt})
                return 0
            action, cmd, crashed = outcome
            if action == "stop":
                self.terminate(self.args.grace)
                command_id = cmd.id if cmd else None
                self.end("stopped", {"event": "stopped", "command_id": command_id}, command_id)
                return STOPPED
            self.terminate(self.args.grace)
            if self.attempt >= self.args.max_restarts:
                self.end("gave_up", {"event": "gave_up", "attempt": self.attempt,
                                     "reason": f"{self.args.max_restarts} restarts"})
                return 1
            if cmd and (cmd.params or {}).get("mode") == "dual_phase_replay":
                follow = self.reproduce(cmd)
                if follow is not None and follow.action == "stop":
                    self.end("stopped", {"event": "stopped", "command_id": follow.id}, follow.id)
                    return STOPPED
                # The verdict: an evict of the machines that reproduced it, or (inconclusive) a restart in place.
                action, cmd = (follow.action, follow) if follow is not None else ("reattempt", cmd)
            evicted = cmd.nodes if cmd and action == "evict" else tuple(crashed)
            replacements = tuple((cmd.params or {}).get("replacements") or ()) if cmd else ()
            plan = plan_restart(self.nodes, self.standby, action, evicted, replacements, cmd)
            if not plan.nodes:
                self.end("gave_up", {"event": "gave_up", "reason": "no nodes left"})
                return 1
            self.attempt += 1
            self.nodes, self.standby, resume = plan.nodes, plan.standby, plan.resume
            reason = cmd.reason if cmd else f"{action} after exit codes without a command"
            self.publish_restart(plan, reason, cmd.id if cmd else None)
            self.emit({"event": "restart", "attempt": self.attempt, "action": action,
                       "command_id": cmd.id if cmd else None, "nodes_out": list(plan.nodes_out),
                       "nodes_in": list(plan.nodes_in), "nodes": list(plan.nodes), "resume": resume})

    # --- dual-phase reproduction --------------------------------------------------------------------
    def reproduce(self, cmd: Command) -> Command | None:
        """Run the plan's groups, publish what reproduced, then wait for the ladder's verdict."""
        try:
            run_reproduction(cmd, self.job, self.nodes, self._run_group, self.args.replay_timeout,
                       self.producer.send_event, self.emit)
            self.producer.flush()
        except ValueError as exc:
            log.error("dual-phase reproduction %s not run: %s", cmd.id, exc)
            self.emit({"event": "replay_refused", "command_id": cmd.id, "reason": str(exc)})
            return None
        # The ladder's verdict is waited for as after a crash (one wait for both launchers): a
        # run_checks sent meanwhile stretches it, an evict of machines already gone is ignored.
        return wait_for_verdict(self._wait_command, self.nodes, self.args.crash_wait)

    def _run_group(self, nodes: tuple[str, ...]) -> tuple[dict[str, int | None], bool]:
        self.spawn("latest", nodes, {"FAULTLENS_REPLAY_STEPS": str(self.args.replay_steps)}, label="replay_start")
        deadline = time.monotonic() + self.args.replay_timeout
        timed_out = False
        while True:
            now_codes = [p.poll() for p, _, _ in self.procs]
            if all(c is not None for c in now_codes) or any(c not in (None, 0) for c in now_codes):
                break  # done, or one rank failed: the fault reproduced and its peers would only wait on it
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(0.2)
        codes: dict[str, int | None] = {}
        for p, node, _ in self.procs:  # per node, a failing rank's code wins
            if node not in codes or p.poll() not in (None, 0):
                codes[node] = p.poll()
        self.terminate(0)
        return codes, timed_out

    def _watch(self) -> tuple[str, Command | None, list[str]] | None:
        """Until the attempt ends: None when every rank finished, else (action, command, nodes)."""
        # The diagnosis can outrun our poll of the ranks: a crash's last log lines reach the
        # remediator, which sends run_checks, before we see the exit. Kept for the crash's wait.
        checks: Command | None = None
        checks_at: float | None = None
        while True:
            cmd = self._wait_command(0.2)
            if cmd is not None:
                if cmd.action in LEAVING_ACTIONS:
                    if evicts_none_of(cmd, self.nodes):
                        log.info("evict %s names no node of this job now; ignored", cmd.id)
                        continue
                    return cmd.action, cmd, []
                if cmd.action == "run_checks":
                    checks, checks_at = cmd, time.monotonic()
                continue  # checkpoint / capture_stacks are the ranks' business
            codes = [(p.poll(), node) for p, node, _ in self.procs]
            if all(c == 0 for c, _ in codes):
                return None
            failed = [(c, node) for c, node in codes if c not in (None, 0)]
            if not failed:
                continue
            known = [(c, node) for c, node in failed if c in EXIT_ACTION]
            if known:
                # A rank obeyed a command we have not read yet: it is on its way.
                cmd = self._wait_command(self.args.command_wait)
                if cmd is not None and not evicts_none_of(cmd, self.nodes):
                    return cmd.action, cmd, []
                # The other ranks that obeyed it reach their step boundary a little later (another
                # node, a slower start): those that exited meanwhile count, as well as the first.
                first = known[0][0]
                exited = [(p.poll(), node) for p, node, _ in self.procs]
                return EXIT_ACTION[first], None, sorted({node for c, node in exited if c == first})
            log.warning("rank(s) on %s crashed with %s; waiting %.0fs for a command",
                        ",".join(sorted({n for _, n in failed})), sorted({c for c, _ in failed}), self.args.crash_wait)
            self.emit({"event": "crash", "attempt": self.attempt, "exit_codes": {n: c for c, n in failed}})
            self.terminate(0)
            cmd = self._wait_after_crash(checks, checks_at)
            if cmd is not None:
                return cmd.action, cmd, []
            return "reattempt", None, []

    def _wait_after_crash(self, checks: Command | None = None, checks_at: float | None = None) -> Command | None:
        """The command that says how to restart after a crash, or None after ``--crash-wait``
        (trainer_hooks/crash_wait.py); ``checks`` is a run_checks read before the crash was seen
        (at ``checks_at``), which holds the wait the same as one read during it."""
        if checks is not None:
            self._say_waiting_for_checks(checks)
        return wait_for_verdict(self._wait_command, self.nodes, self.args.crash_wait, checks=checks,
                                checks_at=checks_at, on_checks=lambda cmd, _at: self._say_waiting_for_checks(cmd))

    def _say_waiting_for_checks(self, cmd: Command) -> None:
        wait_s = checks_wait_s(cmd)
        if wait_s is not None:
            self.emit({"event": "waiting_for_checks", "command_id": cmd.id, "nodes": list(cmd.nodes), "wait_s": wait_s})

    def close(self) -> None:
        quiet_close(self.voice, self.listener.stop, lambda: self.terminate(0), self.producer.close)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the job like Ctrl-C: children are terminated in close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=os.environ.get("FAULTLENS_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s launcher %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.ERROR)
    if not args.bootstrap and not os.environ.get("FAULTLENS_BOOTSTRAP"):
        print("launcher: --bootstrap or FAULTLENS_BOOTSTRAP is required", file=sys.stderr)
        return 2
    try:
        keys = load_verify_keys(args.verify_key)
    except ValueError as exc:
        print(f"launcher: {exc}", file=sys.stderr)
        return 2
    # The trainers' hooks verify with the same keys and keep their command memory in the same place.
    os.environ["FAULTLENS_VERIFY_KEY"] = ",".join(str(Path(p).resolve()) for p in verify_key_paths(args.verify_key))
    if args.state_dir:
        os.environ[STATE_DIR_ENV] = str(args.state_dir)
    try:
        node_names(args)
    except ValueError as exc:
        print(f"launcher: {exc}", file=sys.stderr)
        return 2
    launcher = Launcher(args, KafkaSettings.from_args(args), keys)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return launcher.run()
    except KeyboardInterrupt:
        launcher.terminate(0)  # the children first: the end is published once nothing of the job runs
        launcher.end("cancelled", {"event": "cancelled"})
        return 130
    finally:
        launcher.close()


if __name__ == "__main__":
    raise SystemExit(main())
