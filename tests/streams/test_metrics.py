from prometheus_client import generate_latest

from faultlens.streams import metrics
from faultlens.streams.runner.loop import RunnerStats


def test_runner_stats_and_component_gauges_are_exported():
    stats = RunnerStats(records_in=42, dead_letters=3, lag=7)
    metrics.register_runner("unit-consumer", lambda: stats)
    metrics.register_gauges("unit-agent", lambda: {"agent_spooled": 5})
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'faultlens_events_in_total{consumer="unit-consumer"} 42.0' in text
    assert 'faultlens_dead_letters_total{consumer="unit-consumer"} 3.0' in text
    assert 'faultlens_consumer_lag{consumer="unit-consumer"} 7.0' in text
    assert 'faultlens_agent_spooled{component="unit-agent"} 5.0' in text
    stats.records_in = 50  # read at scrape time, not copied at registration
    assert 'faultlens_events_in_total{consumer="unit-consumer"} 50.0' in generate_latest(metrics.REGISTRY).decode()
