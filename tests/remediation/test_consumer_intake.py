"""What the remediation consumer does with a `check` event its Struct refuses: a dead letter naming
the field, for a person, and still an answer for the ladder (a malformed reproduction outcome ends
the reproduction as inconclusive at once, evicting nobody), never a crash of the consumer."""

from __future__ import annotations

import orjson

from faultlens.events.envelope import Envelope
from faultlens.events.topics import DEAD_LETTER as DEAD_TOPIC
from faultlens.remediation.consumer import CHECKS_TOPIC, RemediationHandler
from faultlens.streams.runner.loop import Record
from tests.remediation.test_stop_checks import EPOCH, NODES, crash, policy, result


def _record(event: Envelope, offset: int) -> Record:
    return Record(CHECKS_TOPIC, 0, offset, event.job.encode(), event, 0)


def _reproducing(tmp_path):
    p = policy(tmp_path, settle_s=1.0)
    for i, ts in enumerate((1000.0, 1010.0, 1020.0)):
        decision, cmd = p.decide(crash(ts=ts, did=f"d{i}"), ts)
        if i == 0:
            for n in NODES:
                p.observe_check(result(n, cmd.id, ts + 1), ts + 1)
    assert decision.rung == "dual_phase_replay"
    return p, cmd


def _dead(out) -> list[dict]:
    return [orjson.loads(o.value) for o in out if o.topic == DEAD_TOPIC]


def test_a_malformed_reproduction_outcome_is_dead_lettered_and_inconclusive(tmp_path):
    p, cmd = _reproducing(tmp_path)
    handler = RemediationHandler(p, clock=lambda: 1100.0)
    done = Envelope(ts=EPOCH + 1100.0, job="j", node="-", source="check", kind="replay_done",
                    data={"command_id": cmd.id, "failing_horizontal": "1", "failing_vertical": [0]})
    out = list(handler.handle([_record(done, 7)]))
    [dead] = _dead(out)
    assert "bad check event" in dead["reason"] and "failing_horizontal" in dead["reason"] and dead["offset"] == 7
    [decision] = handler.decisions
    assert decision.rung == "replay_inconclusive" and decision.nodes == () and "j" not in p.reproductions
    assert not [o for o in out if o.topic != DEAD_TOPIC]  # no command: nobody is evicted on it


def test_a_well_formed_outcome_is_no_dead_letter(tmp_path):
    p, cmd = _reproducing(tmp_path)
    handler = RemediationHandler(p, clock=lambda: 1100.0)
    done = Envelope(ts=EPOCH + 1100.0, job="j", node="-", source="check", kind="replay_done",
                    data={"command_id": cmd.id, "failing_horizontal": [1], "failing_vertical": [0]})
    out = list(handler.handle([_record(done, 8)]))
    assert _dead(out) == [] and [d.rung for d in handler.decisions] == ["replay_evict"]


def test_a_malformed_check_result_costs_only_itself(tmp_path):
    p = policy(tmp_path)
    _, cmd = p.decide(crash(ts=1000.0), 1000.0)
    handler = RemediationHandler(p, clock=lambda: 1001.0)
    bad = result("n000", cmd.id, 1001.0)
    bad = Envelope(ts=bad.ts, job="j", node="n000", source="check", kind="result", data={**bad.data, "passed": "yes"})
    out = list(handler.handle([_record(bad, 1), *(_record(result(n, cmd.id, 1001.0), 2 + i)
                                                 for i, n in enumerate(NODES[1:]))]))
    [dead] = _dead(out)
    assert "data.passed" in dead["reason"]
    assert set(p.pending_checks["j"].results) == set(NODES[1:])  # the good answers all counted


def test_priming_reads_kafka_pythons_records_by_field_and_counts_only_topologies(tmp_path, monkeypatch, caplog):
    """The `jobs` topic as kafka-python's consumer hands it over (ConsumerRecord: the value is its
    eighth field, the timestamp its fifth): a start, a topology, a tombstone of compaction."""
    from kafka.consumer.fetcher import ConsumerRecord

    from faultlens.events.envelope import encode
    from faultlens.events.topology import Topology
    from faultlens.remediation import consumer
    from faultlens.streams import jobs_topic
    from faultlens.streams.config import KafkaSettings

    def record(offset: int, value: bytes | None) -> ConsumerRecord:
        return ConsumerRecord("jobs", 0, 0, offset, 1_700_000_000_000 + offset, 0, b"j", value, [], None, 1, 1, -1)

    topology = Topology.grid(NODES, 1, 1, 2, 2)
    jobs = [
        record(0, encode(Envelope(ts=EPOCH, job="j", node="-", source="job", kind="start", data={}))),
        record(1, encode(Envelope(ts=EPOCH + 1, job="j", node="-", source="job", kind="topology",
                                  data=topology.to_data()))),
        record(2, None),
    ]
    monkeypatch.setattr(jobs_topic, "iter_topics", lambda *a, **k: iter(jobs))
    p = policy(tmp_path)
    assert consumer.prime_topologies(RemediationHandler(p), KafkaSettings(bootstrap="127.0.0.1:1")) == 1
    assert p.topologies["j"].nodes == topology.nodes
    assert "jobs topic offset 2" not in caplog.text  # the tombstone: a normal record, skipped quietly
