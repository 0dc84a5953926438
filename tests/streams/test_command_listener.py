"""The command listener with each Kafka client (issue 13: `--client` on every consumer): ready
means it sees the next command, and a command before that is not delivered to it again."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from faultlens.events.command import Command
from faultlens.events.command_memory import CommandMemory, memory_file
from faultlens.events.command_screen import CommandScreen
from faultlens.events.signing import SigningKey
from faultlens.streams.command_listener import CommandListener
from faultlens.streams.producer import Producer
from tests.progress import thread_ticks, wait_until

pytestmark = pytest.mark.broker

KEY = SigningKey.generate()


def _command(job: str, reason: str) -> Command:
    now = time.time()
    return Command(job=job, action="checkpoint", issued_at=now, expires_at=now + 300, reason=reason,
                   diagnosis_id=f"d-{uuid.uuid4().hex[:6]}").signed(KEY)


def _send(settings, command: Command) -> None:
    with Producer(settings) as p:
        p.send("commands", command.job.encode(), command.encode())
        p.flush()


def _wait(event: threading.Event, listener: threading.Thread, what: str) -> None:
    """Waited for while the listener's thread computes (polls, reads), not 20-30 s a loaded
    machine's consumer start outruns; one that died or blocked stops, and a minute of that fails
    (issue 47)."""
    wait_until(event.is_set, progress=lambda: thread_ticks(listener), stall_s=60, limit_s=240, what=what)


def test_a_listener_obeys_what_comes_after_it_is_ready_and_nothing_from_before(client_settings, tmp_path):
    job = f"listen-{uuid.uuid4().hex[:8]}"
    _send(client_settings, _command(job, "before"))
    got: list[str] = []
    arrived = threading.Event()
    screen = CommandScreen(KEY.verify_keys(), job, "n001", 0,
                           memory=CommandMemory(memory_file(tmp_path, "agent", job, "n001")))
    listener = CommandListener(client_settings, screen, lambda c: (got.append(c.reason), arrived.set()))
    listener.start()
    try:
        _wait(listener.ready, listener, "the listener to reach the end of the commands topic")
        _send(client_settings, _command(job, "after"))
        _wait(arrived, listener, "the command sent after it was ready")
        time.sleep(0.5)  # room for a wrong second command: a check that load cannot fail, only weaken
        assert got == ["after"]
    finally:
        listener.stop()
        listener.join(10)
