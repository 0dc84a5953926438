"""The node agent end to end on the real broker: trainer and kernel logs → parsed events,
heartbeats with source statuses, signed capture_stacks → py-spy dumps, forged → nothing."""

from __future__ import annotations

import threading
import time
import uuid

import orjson
import pytest

from faultlens.collectors.agent import Agent, AgentConfig
from faultlens.events.command import Command
from faultlens.events.envelope import decode
from faultlens.events.signing import SigningKey
from faultlens.streams.producer import Producer
from tests.collectors.stack_fixtures import RANK_FUNCTION
from tests.kafka_fixtures import wait_for_records
from tests.progress import others_ticks, wait_until

pytestmark = [pytest.mark.broker, pytest.mark.e2e]

KEY = SigningKey.generate()
WATCHDOG = ("[rank3]:[E1122 10:11:12.345678 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600042 milliseconds before timing out.")
XID79 = "[  123.456] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def wait_for(settings, topic, job, predicate):
    """Events of ``job`` on ``topic`` once ``predicate(events)`` holds, waited for while they come
    or the agent works (its threads, the processes it runs): a minute of neither ends the wait,
    not a fixed 30 s a loaded machine outruns (issue 47)."""
    return wait_for_records(settings, topic, decode, job, predicate, timeout_s=60,
                            progress=lambda events: (len(events), others_ticks()), limit_s=240)


def test_agent_e2e(kafka_settings, tmp_path, launcher):
    job, node = f"job-{uuid.uuid4().hex[:8]}", "node-e2e"
    (tmp_path / "logs").mkdir()
    kern = tmp_path / "kern.log"
    kern.write_text("[    1.000] Linux version 6.1\n" + XID79 + "\n")
    config = AgentConfig(
        job=job, node=node, interval_s=0.2, heartbeat_interval_s=0.3, nvml=True,  # no GPU here: reported, not fatal
        kernel_log=str(kern), kernel_from_start=True, trainer_logs=[str(tmp_path / "logs" / "rank*.log")],
        launcher_pid=launcher.pid, verify_keys=KEY.verify_keys(), command_memory_file=tmp_path / "seen.jsonl", spool_dir=tmp_path / "spool",
        dump_timeout_s=120,  # against a hung py-spy only, not a bound a loaded machine's dump nears (issue 47)
    )
    before = set(threading.enumerate())
    agent = Agent(config, kafka_settings).start()
    try:
        # A log file that appears after the agent started is read from its start. "Started" is the
        # trainer source's first scan (files there then are followed from their end, as tail -F): on
        # a busy machine its thread may first run after this test writes, so the test waits for it.
        trainer = agent.source("trainer")
        wait_until(lambda: trainer.last_poll is not None, progress=lambda: agent.publisher.stats.published,
                   stall_s=120, what="the trainer source's first scan")
        (tmp_path / "logs" / "rank3.log").write_text("step 1 loss 2.3\n" + WATCHDOG + "\n")
        nccl = wait_for(kafka_settings, "telemetry.nccl", job, lambda ev: any(e.kind == "nccl_timeout" for e in ev))
        assert any(e.kind == "nccl_timeout" for e in nccl), f"no nccl_timeout: {nccl}"
        (timeout,) = [e for e in nccl if e.kind == "nccl_timeout"]
        assert timeout.node == node and timeout.data["rank"] == 3 and timeout.data["seq"] == 42
        assert timeout.data["fault"] == "nccl_error" and timeout.data["line"] == WATCHDOG

        kernel = wait_for(kafka_settings, "telemetry.kernel", job, lambda ev: len(ev) >= 1)
        assert [(e.kind, e.data["fault"], e.data["xid"]) for e in kernel] == [("gpu_lost", "gpu_lost", 79)]

        stacks = agent.source("stacks")
        wait_until(stacks.ready.is_set, progress=others_ticks, stall_s=60, limit_s=240,
                   what="the command listener to reach the end of the commands topic")
        now = time.time()
        forged = Command(job=job, action="capture_stacks", issued_at=now, expires_at=now + 60,
                         nodes=(node,)).signed(SigningKey.generate())
        good = Command(job=job, action="capture_stacks", issued_at=now, expires_at=now + 60, nodes=(node,),
                       reason="hang suspected").signed(KEY)
        other_node = Command(job=job, action="capture_stacks", issued_at=now, expires_at=now + 60,
                             nodes=("some-other-node",)).signed(KEY)
        with Producer(kafka_settings) as producer:
            for cmd in (forged, other_node, good):
                producer.send("commands", job.encode(), cmd.encode())
            producer.flush()

        dumps = wait_for(kafka_settings, "telemetry.stacks", job, lambda ev: len(ev) >= 2)
        assert sorted(e.data["rank"] for e in dumps) == [8, 9]
        assert {e.data["request_id"] for e in dumps} == {good.id}  # nothing for the forged or misaddressed one
        assert all(e.data["ok"] and RANK_FUNCTION in e.data["dump"] and e.node == node for e in dumps)
        assert stacks.refused == 1  # the forged one; a command for another node is not ours to refuse

        beats = wait_for(kafka_settings, "telemetry.heartbeat", job, lambda ev: len(ev) >= 3)
    finally:
        agent.stop()
    # stop() joined what the agent started (the worker that asked nvmlInit outlived it on a node without NVML)
    assert sorted(t.name for t in set(threading.enumerate()) - before if t.is_alive()) == []
    seqs = [e.data["seq"] for e in beats]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    last = beats[-1].data
    ranks = sorted(p.pid for p in __import__("psutil").Process(launcher.pid).children())
    assert last["pids"] == ranks
    assert last["sources"]["nvml"].startswith("unavailable: NVML not available")
    assert last["sources"]["trainer"] == "ok" and last["sources"]["kernel"] == "ok"
    assert last["sources"]["stacks"] == "ok" and last["sources"]["heartbeat"] == "ok"
    assert agent.publisher.stats.unencodable == 0 and len(agent.spool) == 0
    # Dump texts are real py-spy output: they name the process they dumped.
    assert all(f"Process {e.data['pid']}" in e.data["dump"] for e in dumps)
    assert orjson.loads(orjson.dumps(last))  # the heartbeat is plain JSON
