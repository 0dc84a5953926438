"""A user's own training loop (TrainerHook, as docs/integrations.md shows it) trains and evaluates on
held-out data while its broker is killed mid-run (SIGKILL: no goodbye to any client): ``hook.step``
and ``hook.eval`` return at once, what they send waits in the hook's spool (``hook.outbox``), and once
a broker answers again on the same address the evaluations sent during the outage and after it
arrive ("When the broker is away" there; trainer_hooks/outbox.py).

The broker is one of this test's own, the class tests/kafka_fixtures.py starts: the session's broker
serves every other test and must not be killed. The loop runs on a thread of its own that the test
watches by the hook calls that returned, never by a clock: an ``eval`` that raised ends it (the
error is raised here), one that blocked stops the count (a stall).
"""

from __future__ import annotations

import logging
import math
import threading
import uuid

import pytest

from faultlens.events.envelope import decode
from faultlens.streams.admin import ensure_topics
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks.callback_support import eval_chance
from faultlens.trainer_hooks.hook import TrainerHook
from tests.helpers.own_broker import own_broker
from tests.kafka_fixtures import wait_for_records
from tests.progress import wait_until
from tests.trainer_hooks.callback_script import KEY

pytestmark = [pytest.mark.broker, pytest.mark.long(40)]

# step and eval wait on nothing: a minute in which not one of them returned is a block, not load.
STALL_S = 60.0
FEATURES, CLASSES, EVAL_EVERY = 8, 4, 5


class Loop:
    """A small classifier's training loop, with an evaluation on held-out data every EVAL_EVERY steps."""

    def __init__(self, hook: TrainerHook):
        # torch is imported where the loop runs, not at the module's top: every xdist worker collects
        # this file and would spend ~2 CPU-s importing torch that only this one test's worker uses.
        import torch

        self.hook = hook
        g = torch.Generator().manual_seed(0)
        self.model = torch.nn.Linear(FEATURES, CLASSES)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.train_x, self.train_y = torch.randn(64, FEATURES, generator=g), torch.randint(0, CLASSES, (64,), generator=g)
        self.held_x, self.held_y = torch.randn(32, FEATURES, generator=g), torch.randint(0, CLASSES, (32,), generator=g)
        self.step = 0
        self.returned = 0  # hook calls that returned: what the test watches
        self.sent: dict[int, dict[str, float]] = {}  # step -> the metrics evaluated after it

    def evaluate(self) -> dict[str, float]:
        import torch

        with torch.no_grad():
            logits = self.model(self.held_x)
            loss = torch.nn.functional.cross_entropy(logits, self.held_y)
            acc = (logits.argmax(-1) == self.held_y).float().mean()
        return {"val_loss": loss.item(), "val_acc": acc.item()}

    def train(self, steps: int) -> None:
        import torch

        for _ in range(steps):
            self.step += 1
            loss = torch.nn.functional.cross_entropy(self.model(self.train_x), self.train_y)
            self.opt.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.hook.step(loss=loss.item(), grad_norm=float(grad_norm), tokens=len(self.train_x), step=self.step)
            self.returned += 1
            if self.step % EVAL_EVERY == 0:
                metrics = self.evaluate()
                self.hook.eval(metrics, chance=eval_chance(metrics, CLASSES, None, None))
                self.sent[self.step] = metrics
                self.returned += 1

    def run(self, steps: int, what: str) -> list[int]:
        """``steps`` more steps on the loop's thread; the evaluated steps among them."""
        first, errors = self.step + 1, []

        def body() -> None:
            try:
                self.train(steps)
            except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
                errors.append(exc)

        thread = threading.Thread(target=body, name="user-training-loop", daemon=True)
        thread.start()
        wait_until(lambda: not thread.is_alive(), progress=lambda: self.returned, stall_s=STALL_S, what=what)
        if errors:
            raise errors[0]
        assert self.step == first + steps - 1  # every step returned
        return [s for s in self.sent if s >= first]


def arrived_evals(settings: KafkaSettings, job: str, wanted: set[int], hook: TrainerHook) -> dict[int, dict]:
    """The ``train``/``eval`` payloads of ``job`` by step, once every step of ``wanted`` is among them."""

    def evals(records) -> dict[int, dict]:
        return {e.data["step"]: e.data for e in records if e.kind == "eval"}

    found = wait_for_records(
        settings,
        "telemetry.train",
        decode,
        job,
        lambda rs: wanted <= evals(rs).keys(),
        timeout_s=STALL_S,
        progress=lambda rs: (len(rs), hook.outbox.delivered, hook.outbox.pending),
    )
    return evals(found)


def drained(outbox) -> None:
    """Until the broker has acknowledged everything sent so far, while the spool moves."""
    wait_until(
        lambda: outbox.pending == 0 and not outbox.down,
        progress=lambda: (outbox.pending, outbox.delivered, outbox.outages),
        stall_s=STALL_S,
        what="the outbox's spool to be delivered",
    )


@pytest.fixture
def broker(tmp_path):
    with own_broker(tmp_path) as b:  # this module kills its broker: one of its own
        yield b


def test_a_training_loop_evaluates_through_a_killed_broker_and_its_evals_arrive_once_one_is_back(broker, tmp_path, caplog):
    settings = KafkaSettings(bootstrap=broker.bootstrap)
    job = f"eval-lost-{uuid.uuid4().hex[:8]}"
    hook = TrainerHook(
        job=job, rank=0, node="n000", settings=settings, keys=KEY.verify_keys(), state_dir=tmp_path, flight_recorder=False
    )
    outbox = hook.outbox
    assert outbox is not None
    loop = Loop(hook)
    try:
        assert hook.wait_ready()
        before = loop.run(10, "training with the broker up")
        drained(outbox)
        # A batch acknowledged later than FLUSH_S is an outage by design (a loaded machine's fresh broker
        # may be that slow): the kill's is counted from here, and every outage is said once, as is its end.
        base, first = outbox.outages, len(caplog.records)

        with caplog.at_level(logging.WARNING, logger="faultlens.trainer_hooks.outbox"):
            broker.proc.kill()
            broker.proc.wait()
            broker.proc = None
            # The hook finds the broker gone only when a batch goes unacknowledged: train meanwhile.
            during = loop.run(10, "training as the broker dies")
            wait_until(
                lambda: outbox.down,
                progress=lambda: (outbox.pending, outbox.delivered),
                stall_s=STALL_S,
                what="the hook's outbox to find its broker gone",
            )
            delivered = outbox.delivered
            during += loop.run(20, "training and evaluating with no broker")
            # Everything sent since the kill waits in the spool: 30 steps and their 6 evals, none dropped.
            assert outbox.pending == 30 + 6 and outbox.dropped == 0 and outbox.outages == base + 1
            assert outbox.delivered == delivered and not outbox.flush(STALL_S)  # no wait for a broker that is gone

            broker.start()  # the same address, empty (memory storage): what arrives now was spooled or is new
            ensure_topics(settings)
            after = loop.run(10, "training with the broker back")
            arrived = arrived_evals(settings, job, set(during + after), hook)
            drained(outbox)
            assert outbox.dropped == 0
        said = [r.getMessage() for r in caplog.records[first:]]
        assert sum("spooling up to" in m for m in said) == outbox.outages - base, said  # one word of the outage
        assert sum("broker back after" in m for m in said) == outbox.outages - base, said  # and one of its end
    finally:
        hook.close()

    assert before == [5, 10] and during == [15, 20, 25, 30, 35, 40] and after == [45, 50]
    # Every evaluation sent during the outage and after it, as it was sent, with its chance.
    for step in during + after:
        assert arrived[step]["metrics"] == pytest.approx(loop.sent[step]), step
        assert arrived[step]["chance"] == pytest.approx({"val_loss": math.log(CLASSES), "val_acc": 1 / CLASSES})
        assert arrived[step]["rank"] == 0
