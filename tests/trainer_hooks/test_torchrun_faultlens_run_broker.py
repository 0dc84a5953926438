"""`faultlens run` with real processes, on the embedded broker.

Two agents on this machine form one job through c10d rendezvous ("two nodes", one gloo worker
each, on CPU), in order: a worker crashes with a CUDA-like error and both agents wait for the
remediator; a signed restart brings both back in place from the last checkpoint; an evict of n001
ends its agent with exit code 75 while n000 goes on alone; the job finishes. The bus carries the
`job` restart events with their command ids and, last, the job's end. Then one node alone: a
rollback through the workers' hooks, and a stop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from faultlens.events.command import Command
from faultlens.events.envelope import decode
from faultlens.events.signing import SigningKey, write_key_pair
from faultlens.streams.broker import answers, free_port
from faultlens.streams.producer import Producer
from faultlens.trainer_hooks.exit_codes import EVICTED, STOPPED
from tests.kafka_fixtures import job_records

pytestmark = [pytest.mark.broker, pytest.mark.e2e, pytest.mark.long(90)]

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 240  # a bound on a wait that never ends, not a speed check


class Agent:
    """One `faultlens run` process and the JSON lines it (and its workers) print."""

    def __init__(self, node: str, argv: list[str], env: dict, log: Path):
        self.node, self.log = node, log
        self.lines: list[dict] = []
        self.other: list[str] = []  # stdout lines that are not JSON: shown by story(), never dropped unseen
        self.read_all = False  # the process closed its stdout
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=log.open("w"))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        # Bytes, decoded per line: a reader thread that died on one undecodable byte would leave the
        # test waiting for lines that were printed, and the workers blocked on a full pipe.
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", errors="replace")
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            with self._cond:
                if isinstance(obj, dict):
                    self.lines.append(obj)
                else:
                    self.other = [*self.other[-19:], line.rstrip("\n")]
                self._cond.notify_all()
        with self._cond:
            self.read_all = True
            self._cond.notify_all()

    def wait_for(self, predicate, what: str) -> dict:
        deadline = time.monotonic() + HANG_GUARD_S
        with self._cond:
            while True:
                found = next((line for line in self.lines if predicate(line)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                assert left > 0 and not self.read_all, f"{self.node}: no {what}; {self.story()}"
                self._cond.wait(min(left, 1.0))

    def story(self) -> str:
        """What went on, for a failure's message: the agent's lines and the end of its log."""
        events = [line for line in self.lines if "event" in line or "worker" in line]
        tail = [line for line in self.log.read_text(errors="replace").splitlines() if not line.startswith((" ", "[rank"))][-15:]
        other = f"\nstdout lines that were not JSON: {self.other}" if self.other else ""
        return f"lines: {events[-10:]}{other}\nlog tail:\n" + "\n".join(tail)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def send(settings, key: SigningKey, job: str, action: str, nodes: tuple[str, ...] = ()) -> str:
    now = time.time()
    cmd = Command(job=job, action=action, nodes=nodes, issued_at=now, expires_at=now + 120,
                  reason=f"test: {action}").signed(key)
    with Producer(settings) as p:
        p.send("commands", job.encode(), cmd.encode())
        p.flush()
    return cmd.id


def round_of(attempt_line: dict) -> bool:
    return attempt_line.get("event") in ("start", "restart")


def test_two_agents_crash_restart_evict_finish(kafka_settings, tmp_path):
    job = f"frun-{uuid.uuid4().hex[:8]}"
    private, public = write_key_pair(tmp_path / "keys")
    key = SigningKey.from_pem(private.read_bytes())
    ckpt, control = tmp_path / "ckpt", tmp_path / "control"
    ckpt.mkdir()
    control.mkdir()
    port = free_port()
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    env.pop("FAULTLENS_VERIFY_KEY", None)

    def argv(node: str) -> list[str]:
        return [sys.executable, "-m", "faultlens", "run", "--job", job, "--node-name", node,
                "--bootstrap", kafka_settings.bootstrap, "--verify-key", str(public), "--state-dir", str(tmp_path / "state"),
                "--crash-wait", "600", "--grace", "5",
                # torchrun's own arguments from here
                "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", job, "--rdzv-conf", "last_call_timeout=5",
                "--max-restarts", "3", "--monitor-interval", "0.2",
                "-m", "tests.trainer_hooks.elastic_worker", "--ckpt-dir", str(ckpt), "--control", str(control)]

    a = Agent("n000", argv("n000"), env, tmp_path / "n000.log")
    # The first agent on the endpoint hosts c10d's rendezvous store, which dies with it: n000 must
    # host it, as n001 is the one evicted (on a cluster: the endpoint's node, docs/integrations.md).
    deadline = time.monotonic() + HANG_GUARD_S
    while not answers(f"127.0.0.1:{port}", timeout=0.5):
        assert a.proc.poll() is None and time.monotonic() < deadline, f"n000 never hosted the rendezvous\n{a.story()}"
        time.sleep(0.2)
    b = Agent("n001", argv("n001"), env, tmp_path / "n001.log")
    try:
        ids = story(a, b, ckpt, control, kafka_settings, key, job)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- n000\n{a.story()}\n--- n001\n{b.story()}") from None
    finally:
        a.stop()
        b.stop()
    bus(kafka_settings, job, *ids)


def story(a: Agent, b: Agent, ckpt: Path, control: Path, kafka_settings, key: SigningKey, job: str) -> tuple[str, str, int]:
    """The job's life, in order; the restart's and the evict's command ids and the first round's attempt."""
    # Both nodes in one round (a late second agent makes torch restart the first: wait for the round with both).
    # Their order is torch's: it ranks participants by (address, agent pid), and a CI run gave n001 rank 0.
    both = b.wait_for(lambda line: round_of(line) and sorted(line["nodes"]) == ["n000", "n001"], "round with both nodes")
    first = both["attempt"]
    for agent in (a, b):
        agent.wait_for(lambda line: line.get("worker") == "started" and line["attempt"] == first and line["world"] == 2,
                       "worker started")
    deadline = time.monotonic() + HANG_GUARD_S
    while not list(ckpt.glob("step_*.pt")):
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.2)

    # A CUDA-like crash on n001: its agent waits for the remediator instead of restarting at once.
    (control / "crash-n001").touch()
    crash = b.wait_for(lambda line: line.get("event") == "crash", "crash")
    assert crash["exit_codes"] == [1] and crash["attempt"] == first
    assert not any(line.get("event") == "restart" and line["attempt"] > first for line in b.lines)

    restart_id = send(kafka_settings, key, job, "restart")
    for agent in (a, b):
        again = agent.wait_for(lambda line: line.get("event") == "restart" and line["command_id"] == restart_id,
                               "restart on the command")
        assert sorted(again["nodes"]) == ["n000", "n001"] and again["attempt"] == first + 1 and again["resume"] == "latest"
        resumed = agent.wait_for(lambda line: line.get("worker") == "started" and line["attempt"] == first + 1,
                                 "worker restarted")
        assert resumed["resumed"] > 0 and resumed["world"] == 2  # from the last checkpoint, not from scratch

    # Evict n001: its agent leaves with the documented code, n000 goes on alone.
    evict_id = send(kafka_settings, key, job, "evict", ("n001",))
    assert b.proc.wait(HANG_GUARD_S) == EVICTED
    assert b.wait_for(lambda line: line.get("event") == "evicted", "evicted line")["command_id"] == evict_id
    alone = a.wait_for(lambda line: line.get("event") == "restart" and line["command_id"] == evict_id, "restart without n001")
    assert alone["nodes"] == ["n000"] and alone["nodes_out"] == ["n001"] and alone["attempt"] == first + 2
    a.wait_for(lambda line: line.get("worker") == "started" and line["attempt"] == first + 2 and line["world"] == 1,
               "worker alone")

    (control / "finish").touch()
    assert a.proc.wait(HANG_GUARD_S) == 0
    assert a.wait_for(lambda line: line.get("event") == "end", "end")["reason"] == "finished"
    return restart_id, evict_id, first


def bus(kafka_settings, job: str, restart_id: str, evict_id: str, first: int) -> None:
    """What the agents and the hooks said on the bus."""
    mine = [e for e in job_records(kafka_settings, "jobs", decode, None, idle_s=0.3) if e.job == job]
    restarts = [e.data for e in mine if e.kind == "restart" and e.data["command_id"]]
    assert [r["command_id"] for r in restarts] == [restart_id, evict_id]  # once each, by the round's first node
    assert restarts[1]["nodes_out"] == ["n001"] and restarts[1]["attempt"] == first + 2
    assert mine[-1].kind == "end" and mine[-1].data["reason"] == "finished" and mine[-1].data["nodes"] == ["n000"]
    # The rendezvous' placement of every round, from its first node: both nodes, then n000 alone.
    placements = [[(r["rank"], r["node"]) for r in e.data["ranks"]] for e in mine if e.kind == "topology"]
    assert any(sorted(node for _, node in p) == ["n000", "n001"] and [r for r, _ in p] == [0, 1] for p in placements)
    assert placements[-1] == [(0, "n000")]
    acks = [e.data for e in job_records(kafka_settings, "telemetry.train", decode, job, idle_s=0.3)
            if e.kind == "command_ack" and e.data["command_id"] == evict_id and e.data["addressed"]]
    assert acks and all(a["obeyed"] for a in acks)  # the worker on n001 obeyed the evict through its hook


def test_one_node_rolls_back_on_command_and_stops(kafka_settings, tmp_path):
    """--standalone, two workers: a rollback (the hooks exit 77 at a step boundary) restarts them from
    the checkpoint before the last, without spending --max-restarts 0; stop ends the job with 79."""
    job = f"frun-{uuid.uuid4().hex[:8]}"
    private, public = write_key_pair(tmp_path / "keys")
    key = SigningKey.from_pem(private.read_bytes())
    ckpt, control = tmp_path / "ckpt", tmp_path / "control"
    ckpt.mkdir()
    control.mkdir()
    env = {**os.environ, "FAULTLENS_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    agent = Agent("n000", [sys.executable, "-m", "faultlens", "run", "--job", job, "--node-name", "n000",
                           "--bootstrap", kafka_settings.bootstrap, "--verify-key", str(public),
                           "--standalone", "--nproc-per-node", "2", "--max-restarts", "0", "--monitor-interval", "0.2",
                           "-m", "tests.trainer_hooks.elastic_worker", "--ckpt-dir", str(ckpt), "--control", str(control),
                           "--ckpt-every", "3"], env, tmp_path / "n000.log")

    def steps() -> list[int]:
        return sorted(int(p.stem.split("_")[1]) for p in ckpt.glob("step_*.pt"))

    try:
        agent.wait_for(lambda line: line.get("worker") == "started" and line["attempt"] == 0, "workers started")
        deadline = time.monotonic() + HANG_GUARD_S
        while len(steps()) < 2:
            assert time.monotonic() < deadline, "fewer than two checkpoints written"
            time.sleep(0.2)
        rollback_id = send(kafka_settings, key, job, "rollback")
        again = agent.wait_for(lambda line: line.get("event") == "restart", "restart on the rollback")
        assert again["command_id"] == rollback_id and again["resume"] == "rollback" and again["attempt"] == 1
        for rank in (0, 1):
            back = agent.wait_for(lambda line, rank=rank: line.get("worker") == "started" and line["attempt"] == 1 and line["rank"] == rank,
                                  f"rank {rank} restarted")
            assert back["resume"] == "rollback" and 0 < back["resumed"] < steps()[-1] and back["resumed"] in steps()
        stop_id = send(kafka_settings, key, job, "stop")
        assert agent.proc.wait(HANG_GUARD_S) == STOPPED
        end = agent.wait_for(lambda line: line.get("event") == "end", "end")
        assert end["reason"] == "stopped" and end["command_id"] == stop_id
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{agent.story()}") from None
    finally:
        agent.stop()
    mine = [e for e in job_records(kafka_settings, "jobs", decode, None, idle_s=0.3) if e.job == job]
    assert [(e.kind, e.data["command_id"]) for e in mine if e.kind != "topology"] == [("restart", rollback_id),
                                                                                      ("end", stop_id)]
    topologies = [e.data for e in mine if e.kind == "topology"]  # one per round: the start and the rollback's
    assert len(topologies) == 2 and all(t["ranks"] == [{"rank": 0, "node": "n000", "tp": 0, "pp": 0, "dp": 0},
                                                       {"rank": 1, "node": "n000", "tp": 0, "pp": 0, "dp": 1}]
                                        and t["gpus_per_node"] == 2 for t in topologies)
    mine = [e for e in mine if e.kind != "topology"]
    assert mine[0].data["resume"] == "rollback" and mine[-1].data["reason"] == "stopped"
