"""The demo's simulated trainers ack commands as the real trainer hook does (faultlens.demo.hook_acks)."""

from __future__ import annotations

import time

from faultlens.demo.driver import SimDriver
from faultlens.demo.hook_acks import SimulatedHookAcks
from faultlens.demo.state import DemoState
from faultlens.events.command import Command
from faultlens.events.command_screen import CommandScreen
from faultlens.events.envelope import Envelope
from faultlens.events.signing import SigningKey
from faultlens.simulator import SimConfig, SimulatedCluster
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks.hook import TrainerHook

KEY = SigningKey.generate()
JOB = "job-acks"
PLACEMENT = {0: "n0", 1: "n0", 2: "n1", 3: "n1"}


def _cmd(action: str, now: float, job: str = JOB, **kw) -> Command:
    return Command(job=job, action=action, issued_at=now, expires_at=now + 60, reason="test", **kw)


class _Producer:
    """Collects what the real hook sends (its Kafka producer is not needed to see its payloads)."""

    def __init__(self):
        self.sent: list[Envelope] = []

    def send_event(self, event: Envelope) -> None:
        self.sent.append(event)

    def flush(self, timeout: float | None = None) -> None:
        pass


def _real_hook_acks(raw: bytes, now: float, rank: int, node: str) -> list[dict]:
    """What trainer_hooks.hook.TrainerHook acks for ``raw``, through its own callbacks."""
    producer = _Producer()
    hook = TrainerHook(job=JOB, rank=rank, node=node, settings=KafkaSettings(bootstrap="127.0.0.1:1"),
                       listen=False, producer=producer)
    screened = CommandScreen(KEY.verify_keys(), JOB, node, rank, spokesperson=rank == 0).screen(raw, now)
    if screened.obey:
        hook._on_command(screened.command)
    elif screened.ack:
        hook._on_refused(screened)
    hook.close()
    return [dict(e.data) for e in producer.sent if e.kind == "command_ack"]


def test_each_rank_acks_as_the_real_hook_does():
    now = time.time()
    messages = [
        _cmd("capture_stacks", now).signed(KEY).encode(),
        _cmd("checkpoint", now, nodes=("n1",)).signed(KEY).encode(),  # rank 0 says "not for me", once for the job
        _cmd("capture_stacks", now).encode(),  # unsigned: every rank refuses it
        _cmd("capture_stacks", now, job="other-job", nodes=("n1",)).signed(KEY).encode(),  # names n1 only
        b"{not json",
    ]
    for raw in messages:
        sim = SimulatedHookAcks(KEY.verify_keys(), JOB).acks(raw, now, PLACEMENT)
        real = [(node, ack) for rank, node in PLACEMENT.items() for ack in _real_hook_acks(raw, now, rank, node)]
        assert sorted(sim, key=lambda a: a[1]["rank"]) == real, raw[:60]
    sim = SimulatedHookAcks(KEY.verify_keys(), JOB).acks(messages[1], now, PLACEMENT)
    assert [(n, a["rank"], a["obeyed"], a["addressed"]) for n, a in sim] == [
        ("n0", 0, False, False), ("n1", 2, True, True), ("n1", 3, True, True)]
    assert sim[0][1]["reason"] == "for nodes n1, not n0"


def test_obeyed_refused_duplicate_and_silent_answers():
    now = time.time()
    hooks = SimulatedHookAcks(KEY.verify_keys(), JOB)
    evict = _cmd("evict", now, nodes=("n1",)).signed(KEY).encode()
    first = hooks.acks(evict, now, PLACEMENT)
    assert [(a["rank"], a["obeyed"], a["reason"]) for _, a in first if a["addressed"]] == [
        (2, True, "exiting with code 75"), (3, True, "exiting with code 75")]
    again = hooks.acks(evict, now + 1, PLACEMENT)  # each rank remembers what it handled
    assert {a["reason"] for _, a in again if a["addressed"]} == {"duplicate (command id already handled)"}
    assert not any(a["obeyed"] for _, a in again)
    # run_checks is the node agent's: the trainer neither obeys nor acks it.
    assert hooks.acks(_cmd("run_checks", now).signed(KEY).encode(), now, PLACEMENT) == []
    # Trainer processes gone (the job is down): nobody answers.
    assert hooks.acks(_cmd("restart", now).signed(KEY).encode(), now, PLACEMENT, alive=False) == []


def _driver(cluster: SimulatedCluster) -> SimDriver:
    state = DemoState(sim_job=cluster.cfg.job)
    return SimDriver(KafkaSettings(bootstrap="127.0.0.1:1"), cluster, 600.0, 0, KEY.verify_keys(), state)


def test_the_simulated_cluster_acks_commands_on_its_own_clock_and_nodes():
    cluster = SimulatedCluster(SimConfig(nodes=4, gpus=2, seed=3, job=JOB))
    driver = _driver(cluster)
    cluster.advance(cluster.cfg.start_ts + 30.0)
    now = cluster.now
    cmd = _cmd("capture_stacks", now)
    driver.listener.dispatch(cmd.signed(KEY).encode())  # what the listener thread does per message
    driver._obey()
    events = cluster.advance(now + 5.0)
    acks = [e for e in events if (e.source, e.kind) == ("train", "command_ack")]
    assert sorted(e.data["rank"] for e in acks) == list(range(cluster.world))
    assert all(e.data["obeyed"] and e.data["command_id"] == cmd.id and e.data["addressed"] for e in acks)
    assert all(e.node == cluster.node_of(e.data["rank"]) and e.ts == now for e in acks)
    # The capture itself was carried out: the stack dumps answer the same request.
    assert {e.data["request_id"] for e in events if e.kind == "stack_dump"} == {cmd.id}
    assert driver.acks == cluster.world


def test_a_crashed_job_does_not_ack_the_restart_that_revives_it():
    cluster = SimulatedCluster(SimConfig(nodes=4, gpus=2, seed=3, job=JOB))
    driver = _driver(cluster)
    cluster.advance(cluster.cfg.start_ts + 30.0)
    cluster.stop("down")  # the trainers crashed: their processes are gone
    now = cluster.now
    driver.listener.dispatch(_cmd("restart", now).signed(KEY).encode())
    driver._obey()
    events = cluster.advance(now + 5.0)
    assert not [e for e in events if e.kind == "command_ack"]
    assert [e for e in events if (e.source, e.kind) == ("job", "restart")]  # the launcher obeyed it all the same
