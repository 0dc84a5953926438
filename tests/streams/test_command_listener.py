"""The command listener with each Kafka client (issue 13: `--client` on every consumer): ready
means it sees the next command, and a command before that is not replayed to it."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from faultlens.events.command import Command
from faultlens.streams.command_listener import CommandListener
from faultlens.events.command_memory import ReplayMemory, memory_file
from faultlens.events.command_screen import CommandScreen
from faultlens.streams.producer import Producer
from faultlens.events.signing import SigningKey

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


def test_a_listener_obeys_what_comes_after_it_is_ready_and_nothing_from_before(client_settings, tmp_path):
    job = f"listen-{uuid.uuid4().hex[:8]}"
    _send(client_settings, _command(job, "before"))
    got: list[str] = []
    arrived = threading.Event()
    screen = CommandScreen(KEY.verify_keys(), job, "n001", 0,
                           memory=ReplayMemory(memory_file(tmp_path, "agent", job, "n001")))
    listener = CommandListener(client_settings, screen, lambda c: (got.append(c.reason), arrived.set()))
    listener.start()
    try:
        assert listener.ready.wait(30)
        _send(client_settings, _command(job, "after"))
        assert arrived.wait(20)
        time.sleep(0.5)
        assert got == ["after"]
    finally:
        listener.stop()
        listener.join(10)
