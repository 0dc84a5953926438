"""TrainerHook against the real embedded broker: telemetry out, commands in, refusals acked."""

import os
import time
import uuid

import orjson
import pytest
from msgspec.structs import replace

from faultlens.events.command import Command
from faultlens.events.envelope import as_float, decode
from faultlens.events.signing import SigningKey, write_key_pair
from faultlens.streams.producer import Producer
from faultlens.trainer_hooks.exit_codes import RESTART
from faultlens.trainer_hooks.hook import TrainerHook
from tests.kafka_fixtures import job_records, wait_for_records
from tests.progress import cpu_ticks, wait_until

pytestmark = pytest.mark.broker
KEY = SigningKey.generate()  # the deployment's remediation consumer


def events(settings, topic, job, kind=None):
    return [e for e in job_records(settings, topic, decode, job) if kind is None or e.kind == kind]


STALL_S = 60.0  # the listener screened nothing and no record came for this long: stuck, not slow


def wait_events(settings, topic, job, kind, hook, count=1):
    """The ``kind`` events of ``job`` once ``count`` of them are on ``topic``, read by one reader
    (tests/kafka_fixtures.py), waited for while ``hook``'s listener screens commands or records come."""
    def progress(records):
        return len(records), hook.listener.obeyed, hook.listener.refused

    found = wait_for_records(settings, topic, decode, job, lambda rs: len([e for e in rs if e.kind == kind]) >= count,
                             timeout_s=STALL_S, progress=progress)
    return [e for e in found if e.kind == kind]


@pytest.fixture
def job():
    return f"hook-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def hook(kafka_settings, job, tmp_path):
    saved = []
    h = TrainerHook(job=job, rank=3, node="n001", settings=kafka_settings, keys=KEY.verify_keys(), state_dir=tmp_path,
                    on_checkpoint=lambda: saved.append(h.steps), flops_per_step=1e9, peak_flops=1e12, exit_grace_s=30)
    h.saved = saved
    assert h.wait_ready()
    yield h
    h.close()


def send(settings, *commands: Command | bytes):
    with Producer(settings) as p:
        for c in commands:
            p.send("commands", b"k", c if isinstance(c, bytes) else c.encode())
        p.flush()


def command(job, action, **kw):
    now = time.time()
    return Command(job=job, action=action, issued_at=now, expires_at=now + 60, **kw).signed(KEY)


def test_step_telemetry_carries_nan_as_text_and_derived_rates(kafka_settings, hook, job):
    hook.step(loss=0.5, grad_norm=1.0, tokens=64, compute_s=0.01)
    hook.step(loss=float("nan"), grad_norm=float("inf"), tokens=64)
    hook.producer.flush()
    steps = sorted(events(kafka_settings, "telemetry.train", job, "step"), key=lambda e: e.data["step"])
    assert [e.data["step"] for e in steps] == [1, 2]
    first, second = steps[0].data, steps[1].data
    assert first["rank"] == 3 and first["loss"] == 0.5 and first["compute_s"] == 0.01 and steps[0].node == "n001"
    assert first["tokens_per_s"] > 0 and 0 < first["mfu"]
    assert second["loss"] == "nan" and second["grad_norm"] == "inf" and as_float(second["loss"]) != as_float(second["loss"])


def test_capture_stacks_publishes_every_thread_via_faulthandler(kafka_settings, hook, job):
    c = command(job, "capture_stacks")
    send(kafka_settings, c)
    dumps = wait_events(kafka_settings, "telemetry.stacks", job, "stack_dump", hook)
    assert len(dumps) == 1
    data = dumps[0].data
    assert data["tool"] == "faulthandler" and data["request_id"] == c.id and data["rank"] == 3 and data["pid"] == os.getpid()
    assert "Thread" in data["dump"] and "test_hook_broker.py" in data["dump"] and "listener.py" in data["dump"]


def test_forged_expired_duplicate_and_garbage_are_refused_and_acked(kafka_settings, hook, job):
    now = time.time()
    other_deployment = Command(job=job, action="stop", issued_at=now, expires_at=now + 60).signed(SigningKey.generate())
    unsigned = Command(job=job, action="stop", issued_at=now, expires_at=now + 60, key_id=KEY.key_id)
    forged = replace(unsigned, signature=SigningKey.generate().sign(unsigned.canonical()))  # claims our key id
    altered = orjson.loads(command(job, "checkpoint").encode())
    altered["action"] = "stop"
    expired = Command(job=job, action="stop", issued_at=now - 120, expires_at=now - 60).signed(KEY)
    year_long = Command(job=job, action="stop", issued_at=now, expires_at=now + 365 * 86400).signed(KEY)
    good = command(job, "checkpoint")
    other_node = command(job, "stop", nodes=("n999",))
    other_job = command(f"{job}-other", "stop")
    send(kafka_settings, other_deployment, forged, orjson.dumps(altered), expired, year_long, good, good,
         b"\xff not json", other_node, other_job)
    acks = wait_events(kafka_settings, "telemetry.train", job, "command_ack", hook, count=8)
    reasons = {(a.data["command_id"], a.data["obeyed"]): a.data["reason"] for a in acks}
    assert "unknown key" in reasons[(other_deployment.id, False)]
    assert "bad signature" in reasons[(forged.id, False)] and "bad signature" in reasons[(altered["id"], False)]
    assert "expired" in reasons[(expired.id, False)]
    assert "over the 600s this receiver accepts" in reasons[(year_long.id, False)]
    assert reasons[(None, False)].startswith("malformed")
    by = [(a.data["command_id"], a.data["obeyed"]) for a in acks]
    assert by.count((good.id, True)) == 1 and by.count((good.id, False)) == 1  # the duplicate is refused
    assert reasons[(good.id, False)] == "duplicate (command id already handled)"
    # not addressed here and this is rank 3 of the job: not acked (every rank of every job would
    # answer every command); rank 0's acks are in the next test
    assert not {other_node.id, other_job.id} & {cid for cid, _ in by}
    assert hook.exit_code is None  # nothing forged or stale was obeyed
    hook.step(loss=1.0)
    assert hook.saved == [1]  # the genuine checkpoint ran at the step boundary


def test_rank0_acks_misaddressed_commands_of_its_job_and_a_node_acks_another_jobs_command_naming_it(
        kafka_settings, job, tmp_path):
    rank0 = TrainerHook(job=job, rank=0, node="n000", settings=kafka_settings, keys=KEY.verify_keys(),
                        state_dir=tmp_path, exit_grace_s=60)
    try:
        assert rank0.wait_ready()
        other_node = command(job, "evict", nodes=("n999",))
        stale = command(f"{job}-before", "evict", nodes=("n000",))  # the job that ran here before
        elsewhere = command(f"{job}-other", "evict", nodes=("n555",))
        send(kafka_settings, other_node, stale, elsewhere, command(job, "checkpoint"))
        acks = wait_events(kafka_settings, "telemetry.train", job, "command_ack", rank0, count=3)
        reasons = {a.data["command_id"]: (a.data["obeyed"], a.data["reason"]) for a in acks}
        assert reasons[other_node.id] == (False, "for nodes n999, not n000")
        assert reasons[stale.id] == (False, f"for job {job}-before, not {job} (names n000)")
        assert elsewhere.id not in reasons
        assert rank0.exit_code is None
    finally:
        rank0.close()


def test_a_duplicate_command_after_the_trainer_restarted_is_refused(kafka_settings, job, tmp_path):
    """The hook's command memory lives in its state dir (the checkpoint dir in the reference
    trainer), so a restarted trainer still knows the evict it obeyed before."""
    evict = command(job, "evict", nodes=("n001",))
    first = TrainerHook(job=job, rank=3, node="n001", settings=kafka_settings, keys=KEY.verify_keys(),
                        state_dir=tmp_path, exit_grace_s=60)
    try:
        assert first.wait_ready()
        send(kafka_settings, evict)
        wait_events(kafka_settings, "telemetry.train", job, "command_ack", first)
        assert first.exit_command == evict
    finally:
        first.close()
    restarted = TrainerHook(job=job, rank=3, node="n001", settings=kafka_settings, keys=KEY.verify_keys(),
                            state_dir=tmp_path, exit_grace_s=60)
    try:
        assert restarted.wait_ready()
        send(kafka_settings, evict)  # the same signed bytes, played back within their lifetime
        acks = wait_events(kafka_settings, "telemetry.train", job, "command_ack", restarted, count=2)
        assert [(a.data["obeyed"], a.data["reason"]) for a in acks][-1] == (False, "duplicate (command id already handled)")
        assert restarted.exit_code is None
    finally:
        restarted.close()


def test_restart_command_ends_the_loop_at_a_step_boundary_with_its_code(kafka_settings, hook, job):
    send(kafka_settings, command(job, "restart", nodes=("n001",)))
    wait_events(kafka_settings, "telemetry.train", job, "command_ack", hook)
    with pytest.raises(SystemExit) as exc:
        hook.step(loss=1.0)
    assert exc.value.code == RESTART


def test_a_loop_stuck_past_the_grace_is_ended_with_the_command_code(kafka_settings, job, tmp_path):
    """In a child process (the watchdog ends its process): the loop never reaches a boundary."""
    import subprocess
    import sys

    _, public = write_key_pair(tmp_path / "keys", KEY)
    script = f"""
import time
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks.hook import TrainerHook
h = TrainerHook(job={job!r}, rank=0, node="n000", settings=KafkaSettings(bootstrap={kafka_settings.bootstrap!r}),
                state_dir={str(tmp_path)!r}, exit_grace_s=1.0)
h.wait_ready()
print("ready", flush=True)
time.sleep(120)  # stuck: never calls step()
"""
    env = {**os.environ, "FAULTLENS_VERIFY_KEY": str(public)}  # the hook's default: keys from the environment
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "ready"
        send(kafka_settings, command(job, "rollback"))
        # Waited for while the child's CPU clock moves (its listener polls): a busy machine slows it,
        # a dead listener stops it; the outer limit ends a child that polls and never exits.
        wait_until(lambda: proc.poll() is not None, progress=lambda: cpu_ticks(proc.pid), stall_s=STALL_S,
                   limit_s=240, what="the stuck loop's child to exit")
        assert proc.returncode == 77
    finally:
        proc.kill()
