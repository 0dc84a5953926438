"""The remediation state on a compacted topic (remediation.state_log): a second remediation member
goes on with a job's ladder and spares where the first left them (issue 11: rebalances lose nothing)."""

import pytest

from faultlens.remediation.consumer import RemediationHandler
from faultlens.remediation.state_log import StateLog
from faultlens.streams.producer import Producer
from tests.remediation.test_state import crash, evict, policy

pytestmark = pytest.mark.broker
_stores: list[StateLog] = []


@pytest.fixture(autouse=True)
def close_stores():
    """A StateLog holds a consumer and a producer until closed: each test's are closed at its end."""
    yield
    while _stores:
        _stores.pop().close()


def state_log(settings, topic) -> StateLog:
    _stores.append(StateLog(settings, topic))
    return _stores[-1]


def member(settings, topic):
    """A remediation member whose ladders and pools live on ``topic``."""
    p = policy(None)
    fresh = type(p)(p.signing_key, p.config, p.safety, store=state_log(settings, topic))
    fresh.observe_topology("j", p.topologies["j"])
    return fresh


def test_a_second_member_climbs_the_ladder_where_the_first_left_it(kafka_settings, fresh_topic):
    topic = fresh_topic(3)
    first = member(kafka_settings, topic)
    assert [first.decide(crash(1000 + 100 * i), 1000 + 100 * i)[0].rung for i in range(2)] == ["reattempt", "rollback"]
    second = member(kafka_settings, topic)  # the partition of job j moved here
    decision, cmd = second.decide(crash(1200), 1200)
    assert decision.rung == "dual_phase_replay" and cmd.params["mode"] == "dual_phase_replay"
    assert policy(None).decide(crash(1200), 1200)[0].rung == "reattempt"  # what it would do without


def test_a_member_that_was_running_takes_the_newer_state_on_reassignment(kafka_settings, fresh_topic):
    topic = fresh_topic(3)
    standing = member(kafka_settings, topic)  # started before the other member decided anything
    other = member(kafka_settings, topic)
    _, cmd = other.decide(evict("n001", 1000), 1000)
    spare = cmd.params["replacements"]
    handler = RemediationHandler(standing)
    handler.on_assigned([])  # the group moved job j's partition here
    assert handler.handle([]) == []  # the next batch reads the store first
    assert standing.pools["j"].used == spare == ["s000"]
    _, again = standing.decide(evict("n002", 1100), 1100)
    assert again.params["replacements"] == ["s001"]  # a spare handed out stays handed out


def test_garbage_on_the_state_topic_starts_that_job_over_and_is_reported(kafka_settings, fresh_topic):
    topic = fresh_topic(3)
    with Producer(kafka_settings) as p:
        p.send(topic, b"j", b"{not json")
        p.flush()
    store = state_log(kafka_settings, topic)
    assert store.load({"min_confidence": 0.5, "episode_s": 3600, "settle_s": 30}) == {}
    assert store.errors and "remediation state topic" in store.errors[0]
