"""A trainer's event too large for its Kafka client is refused for good, the steps before and after it
arrive, and no outage is reported (trainer_hooks/outbox.py; the unit tests are in
test_outbox_rejections.py).

The real hook and its real clients (each in turn) on the session's broker: an evaluation with 60,000
per-layer metrics (~2 MB) is over kafka-python's max_request_size (1 MiB) and librdkafka's
message.max.bytes (1 MB) at their defaults, so the client itself refuses it, as it would a stack or
Flight Recorder dump of that size. Waits are on the outbox's state and the topic, never on a clock.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from faultlens.events.envelope import decode
from faultlens.trainer_hooks.hook import TrainerHook
from tests.kafka_fixtures import wait_for_records
from tests.progress import wait_until

pytestmark = [pytest.mark.broker]

STALL_S = 60.0  # nothing here waits on a broker that is gone: a minute without progress is a block
OUTBOX_LOG = "faultlens.trainer_hooks.outbox"


def test_an_event_over_the_clients_size_limit_is_refused_and_the_steps_around_it_arrive(client_settings, tmp_path, caplog):
    job = f"refused-{uuid.uuid4().hex[:8]}"
    hook = TrainerHook(
        job=job, rank=0, node="n000", settings=client_settings, keys=(), state_dir=tmp_path, listen=False, flight_recorder=False
    )
    outbox = hook.outbox
    assert outbox is not None
    huge = {f"layer{i:06d}.grad_norm": 0.5 for i in range(60_000)}
    try:
        with caplog.at_level(logging.WARNING, logger=OUTBOX_LOG):
            for _ in range(3):
                hook.step(loss=1.0)
            hook.eval(huge)  # after step 3: refused
            for _ in range(3):
                hook.step(loss=0.9)
            hook.eval({"val_loss": 0.7})  # after step 6: arrives
            assert hook.steps == 6  # every call returned: training went on
            wait_until(
                lambda: outbox.pending == 0 and outbox.rejected == 1,
                progress=lambda: (outbox.delivered, outbox.pending, outbox.rejected),
                stall_s=STALL_S,
                what="the outbox to deliver all but the refused event",
            )
        said = [r.getMessage() for r in caplog.records if r.name == OUTBOX_LOG]
        records = wait_for_records(
            client_settings,
            "telemetry.train",
            decode,
            job,
            lambda rs: sum(e.kind == "step" for e in rs) >= 6 and any(e.kind == "eval" for e in rs),
            timeout_s=STALL_S,
            progress=len,
        )
    finally:
        hook.close()
    assert sorted(e.data["step"] for e in records if e.kind == "step") == [1, 2, 3, 4, 5, 6]
    assert [(e.data["step"], e.data["metrics"]) for e in records if e.kind == "eval"] == [(6, {"val_loss": 0.7})]
    assert outbox.rejected == 1 and outbox.delivered == 7 and outbox.dropped == 0
    assert outbox.outages == 0 and not outbox.down  # a refusal is no broker lost
    assert len(said) == 1, said  # one word of it while training; close sums it up
    assert "telemetry.train" in said[0] and "too large" in said[0] and "bytes" in said[0]
    assert "1 refused" in caplog.text
