"""Prometheus metrics for long-running commands (``--metrics-port``): the pipeline's own health.

Each consumer registers its GroupRunner; a scrape reads their stats (no Kafka calls on scrape).
Extra counters (diagnoses, commands) are registered by the consumers that produce them.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry()
_runners: dict[str, Callable[[], object]] = {}
_lock = threading.Lock()

DIAGNOSES = Counter("faultlens_diagnoses", "diagnoses produced", ["fault", "action"], registry=REGISTRY)
COMMANDS = Counter("faultlens_commands", "commands decided", ["action", "sent"], registry=REGISTRY)
# Log lines that look alarming (error, fail, timeout, ...) but no rule took: a rule may be missing.
UNRECOGNISED = Counter("faultlens_log_lines_unrecognised", "alarming log lines no rule recognised", ["source"],
                       registry=REGISTRY)


class _RunnerCollector:
    def collect(self):
        specs = [
            ("faultlens_events_in", "records consumed", "records_in", CounterMetricFamily),
            ("faultlens_dead_letters", "messages sent to dead-letter", "dead_letters", CounterMetricFamily),
            ("faultlens_outputs", "records produced by handlers", "outputs", CounterMetricFamily),
            ("faultlens_commits", "offset commits", "commits", CounterMetricFamily),
            ("faultlens_redeliveries", "batches re-read after a delivery failure", "redeliveries", CounterMetricFamily),
            ("faultlens_refused_outputs", "outputs refused for good (too large...), dead-lettered short in their place",
             "refused_outputs", CounterMetricFamily),
            ("faultlens_consumer_lag", "messages behind the high-water marks", "lag", GaugeMetricFamily),
            ("faultlens_late_released", "records handed on behind event time already handed on (a partition "
             "passed over as idle)", "late_released", CounterMetricFamily),
            ("faultlens_loop_seconds", "duration of the last poll-handle-commit loop", "last_loop_s", GaugeMetricFamily),
        ]
        with _lock:
            runners = {name: get() for name, get in _runners.items()}
        for metric, doc, attr, family in specs:
            fam = family(metric, doc, labels=["consumer"])
            for name, stats in runners.items():
                fam.add_metric([name], float(getattr(stats, attr)))
            yield fam


REGISTRY.register(_RunnerCollector())


_gauges: dict[str, Callable[[], dict[str, float]]] = {}


class _GaugeCollector:
    """Components that are not consumer groups (the node agent) report named numbers."""

    def collect(self):
        with _lock:
            sources = {name: get() for name, get in _gauges.items()}
        families: dict[str, GaugeMetricFamily] = {}
        for name, values in sources.items():
            for key, value in values.items():
                fam = families.setdefault(key, GaugeMetricFamily(f"faultlens_{key}", key.replace("_", " "),
                                                                 labels=["component"]))
                fam.add_metric([name], float(value))
        yield from families.values()


REGISTRY.register(_GaugeCollector())


def register_gauges(name: str, getter: Callable[[], dict[str, float]]) -> None:
    with _lock:
        _gauges[name] = getter


def add_metrics_argument(parser) -> None:
    """``--metrics-port`` for every long-running command (env FAULTLENS_METRICS_PORT)."""
    from faultlens.events.env_number import env_whole

    parser.add_argument("--metrics-port", type=int, default=env_whole("FAULTLENS_METRICS_PORT", 0, on_bad="raise"),
                        help="serve Prometheus /metrics on this port (default off; env FAULTLENS_METRICS_PORT)")


def register_runner(name: str, stats_getter: Callable[[], object]) -> None:
    with _lock:
        _runners[name] = stats_getter


def serve(port: int | None, addr: str = "0.0.0.0") -> None:
    """Start the /metrics endpoint when a port is given (0 or None: no endpoint)."""
    if not port:
        return
    start_http_server(port, addr=addr, registry=REGISTRY)
    log.info("metrics on http://%s:%d/metrics", addr, port)
