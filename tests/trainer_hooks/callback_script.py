"""Signed commands sent into a real training run at chosen steps, for the framework callbacks' tests
(test_lightning_callback.py, test_hf_trainer_callback.py).

A test plans commands by step (``Script({3: command(job, "checkpoint")})``); the framework's test
callback calls :meth:`Script.before_step` as each step begins, which sends the step's command and
waits until the hook has taken it (its ack, or for ``capture_stacks`` its stack dump, is on the
broker), so the callback obeys it at the end of that very step: the tests say which step a command
lands on, never a clock.
"""

from __future__ import annotations

import time

from faultlens.events.command import Command
from faultlens.events.envelope import Envelope, decode
from faultlens.events.signing import SigningKey
from faultlens.streams.producer import Producer
from tests.kafka_fixtures import wait_for_records

KEY = SigningKey.generate()  # the deployment's remediation consumer
TAKEN_S = 60.0  # a command reaches a listening hook in milliseconds; this bounds a broken broker


def command(job: str, action: str, **params) -> Command:
    now = time.time()
    return Command(job=job, action=action, issued_at=now, expires_at=now + 300, params=params).signed(KEY)


def records(settings, topic: str, job: str, kind: str, predicate=lambda found: True, moved=None) -> list[Envelope]:
    """``job``'s ``kind`` events on ``topic``, once ``predicate`` holds for them; or when TAKEN_S
    passed, or (given ``moved()``, what a job in other processes changes as it works) when what
    ``moved()`` returns stayed the same for TAKEN_S."""
    def of_kind(found):
        return [e for e in found if e.kind == kind]
    progress = (lambda found: moved()) if moved is not None else None
    return of_kind(wait_for_records(settings, topic, decode, job, lambda found: predicate(of_kind(found)),
                                    timeout_s=TAKEN_S, progress=progress))


def steps(settings, job: str, predicate=lambda found: True, moved=None) -> list[dict]:
    """The ``train``/``step`` payloads of ``job``, in the order published."""
    return [e.data for e in records(settings, "telemetry.train", job, "step",
                                    lambda found: predicate([e.data for e in found]), moved)]


def send(settings, cmd: Command) -> None:
    with Producer(settings) as p:
        p.send("commands", cmd.job.encode(), cmd.encode())
        p.flush()


class Script:
    def __init__(self, settings, plan: dict[int, Command]):
        self.settings, self.plan, self.sent = settings, dict(plan), []

    def before_step(self, step: int) -> None:
        cmd = self.plan.pop(step, None)
        if cmd is None:
            return
        send(self.settings, cmd)
        self.sent.append((step, cmd))
        if cmd.action == "capture_stacks":
            taken = records(self.settings, "telemetry.stacks", cmd.job, "stack_dump",
                            lambda found: any(e.data["request_id"] == cmd.id for e in found))
        else:
            taken = records(self.settings, "telemetry.train", cmd.job, "command_ack",
                            lambda found: any(e.data["command_id"] == cmd.id for e in found))
        assert taken, f"the hook never took {cmd.action} {cmd.id} (sent before step {step})"
