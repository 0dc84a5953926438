"""The diagnosis, remediation and history consumers in one process (`faultlens up`, `faultlens demo`).

Each consumer is the same GroupRunner + handler that `faultlens diagnose|remediate|history` run
alone; here each gets its own thread and consumer group, and the caller's main thread owns the
signals. Shutdown keeps the at-least-once promise: diagnosis stops first and publishes what it
still held (open incidents), remediation and history drain what is left, then each runner
finishes its batch, commits and closes.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from faultlens.diagnosis.edge.consumer import GROUP as DIAGNOSE_GROUP
from faultlens.diagnosis.edge.consumer import diagnose_consumer
from faultlens.diagnosis.engine.core import EngineConfig
from faultlens.events.signing import SigningKey
from faultlens.remediation.consumer import GROUP as REMEDIATE_GROUP
from faultlens.remediation.consumer import RemediationHandler, build_policy, remediate_consumer
from faultlens.remediation.decision import Decision, PolicyConfig
from faultlens.remediation.safety import SafetyConfig
from faultlens.streams import metrics
from faultlens.streams.admin import ensure_topics
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer
from faultlens.streams.runner.loop import GroupRunner, RunnerStats

if TYPE_CHECKING:  # the history's DuckDB is imported only when the history consumer is built
    import duckdb

log = logging.getLogger(__name__)

CONSUMERS = ("diagnose", "remediate", "history")


def suffixed(base: str, suffix: str) -> str:
    """A consumer group's name with ``--group-suffix`` appended (tests, parallel demos)."""
    return f"{base}-{suffix}" if suffix else base


@dataclass
class PipelineOptions:
    """What `faultlens up` (or the demo) configures; defaults match the single-consumer commands."""

    signing_key: SigningKey  # the private half of the command-signing pair (events.signing)
    consumers: tuple[str, ...] = CONSUMERS
    db: Path | None = None  # history file; required when "history" is among the consumers
    history_sample_rate: float = 1.0
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    breaker_file: Path | None = None  # None: an in-memory breaker (the demo must not trip the real one)
    remediation_state_file: Path | None = None  # ladders and standby pools; None: in memory (the demo)
    decision_log: Path | None = None
    engine: EngineConfig = field(default_factory=EngineConfig)
    group_suffix: str = ""  # appended to every consumer group name (tests, parallel demos)
    max_idle_s: float = 2.0  # how long a caught-up, silent partition holds diagnosis's event time back
    on_decision: Callable[[Decision], None] | None = None
    # Extension point for the demo (faultlens/demo/wiring.py); production leaves it None.
    wrap_remediation: Callable[[RemediationHandler], Any] | None = None
    # How remediation acts on the scheduler (remediation.actuators); None: commands only.
    actuator: Any = None
    requeue_on_evict: bool = True
    # Every machine's record across jobs on the compacted `fleet` topic (remediation.fleet_log);
    # False keeps it in memory (the demo).
    fleet_topic: bool = False


@dataclass
class Consumer:
    name: str
    runner: GroupRunner
    # Its own handler, read by name below: the diagnose handler (diagnose_consumer gives it untyped),
    # the RemediationHandler or the demo's wrap of it (PipelineOptions.wrap_remediation: Any), the
    # HistoryHandler. Typed Any until the diagnose factory names its handler's type.
    handler: Any
    thread: threading.Thread | None = None
    error: BaseException | None = None


def _stats_of(runner: GroupRunner) -> Callable[[], RunnerStats]:
    return lambda: runner.stats  # read at each scrape


class Pipeline:
    """Build with :meth:`build`, then :meth:`start`, later :meth:`shutdown` (from any thread)."""

    def __init__(self, settings: KafkaSettings, options: PipelineOptions):
        unknown = set(options.consumers) - set(CONSUMERS)
        if unknown:
            raise ValueError(f"unknown consumer(s) {', '.join(sorted(unknown))} (known: {', '.join(CONSUMERS)})")
        if "history" in options.consumers and options.db is None:
            raise ValueError("the history consumer needs a DuckDB file (db)")
        self.settings = settings
        self.options = options
        self.consumers: dict[str, Consumer] = {}
        self.history_conn: duckdb.DuckDBPyConnection | None = None
        self.fleet_store: Any = None  # remediation's fleet record clients, closed after its consumer
        self.failed = threading.Event()  # a consumer thread died; the caller should shut down

    # --- building -------------------------------------------------------------------------------
    def _group(self, base: str) -> str:
        return suffixed(base, self.options.group_suffix)

    def build(self) -> "Pipeline":
        ensure_topics(self.settings)
        o = self.options
        if "diagnose" in o.consumers:
            self._add_diagnose()
        if "remediate" in o.consumers:
            self._add_remediate()
        if "history" in o.consumers:
            self._add_history()
        for c in self.consumers.values():
            metrics.register_runner(c.name, _stats_of(c.runner))
        return self

    def _add_diagnose(self) -> None:
        o = self.options
        group = self._group(DIAGNOSE_GROUP)
        runner, handler = diagnose_consumer(self.settings, o.engine, group=group, max_idle_s=o.max_idle_s)
        self.consumers["diagnose"] = Consumer("diagnose", runner, handler)

    def _add_remediate(self) -> None:
        o = self.options
        fleet_store = None
        if o.fleet_topic:
            from faultlens.remediation.fleet_log import FleetLog
            fleet_store = self.fleet_store = FleetLog(self.settings)
        policy = build_policy(o.signing_key, o.policy, o.safety, o.breaker_file, o.remediation_state_file,
                              fleet_store=fleet_store)
        runner, handler = remediate_consumer(self.settings, policy, group=self._group(REMEDIATE_GROUP),
                                             decision_log=o.decision_log, emit=o.on_decision,
                                             wrap=o.wrap_remediation, actuator=o.actuator,
                                             requeue_on_evict=o.requeue_on_evict)
        self.consumers["remediate"] = Consumer("remediate", runner, handler)

    def _add_history(self) -> None:
        from faultlens.history.consumer import GROUP as HISTORY_GROUP
        from faultlens.history.consumer import history_runner
        from faultlens.history.schema import open_history
        from faultlens.history.sink import Sampling

        conn = self.history_conn = open_history(self.options.db, create=True)
        runner, handler = history_runner(self.settings, conn,
                                         sampling=Sampling(self.options.history_sample_rate),
                                         group=self._group(HISTORY_GROUP),
                                         keys=self.options.signing_key.verify_keys())
        self.consumers["history"] = Consumer("history", runner, handler)

    # --- running --------------------------------------------------------------------------------
    def start(self) -> "Pipeline":
        for c in self.consumers.values():
            c.thread = threading.Thread(target=self._run, args=(c,), name=f"faultlens-{c.name}", daemon=True)
            c.thread.start()
        return self

    def _run(self, c: Consumer) -> None:
        try:
            c.runner.run(handle_signals=False)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread, which shuts down
            log.exception("consumer %s stopped on an error", c.name)
            c.error = exc
            self.failed.set()

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Whether every consumer joined its group (got partitions) within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for c in self.consumers.values():
            while not c.runner.ready.wait(0.2):
                if self.failed.is_set() or time.monotonic() > deadline:
                    return False
        return True

    def stats(self) -> dict[str, RunnerStats]:
        return {name: c.runner.stats for name, c in self.consumers.items()}

    def shutdown(self, drain_s: float = 3.0) -> dict[str, dict]:
        """Stop in order, lose nothing; returns per-consumer stats (JSON-ready). ``drain_s`` bounds the
        wait for the downstream consumers to read to the end (the demo, whose history is its report, waits longer)."""
        diag = self.consumers.get("diagnose")
        if diag is not None:
            self._stop(diag)
            final = diag.handler.flush() if diag.error is None else []
            if final:
                with Producer(self.settings) as producer:
                    producer.send_all(final)
                    producer.flush()
                log.info("published %d pending diagnosis record(s) at shutdown", len(final))
        rest = [c for c in self.consumers.values() if c is not diag]
        self._drain(rest, drain_s)
        for c in rest:
            self._stop(c)
        if self.fleet_store is not None:
            # Before `up` stops its embedded broker: a client left open logs a page of kafka ERRORs.
            self.fleet_store.close()
            self.fleet_store = None
        if self.history_conn is not None:
            self.history_conn.close()
            self.history_conn = None
        return self.summary()

    @staticmethod
    def _stop(c: Consumer) -> None:
        c.runner.stop()
        if c.thread is not None:
            c.thread.join(60)
            if c.thread.is_alive():
                log.error("consumer %s did not stop within 60 s", c.name)

    @staticmethod
    def _drain(consumers: list[Consumer], limit_s: float) -> None:
        """Let the downstream consumers read what diagnosis just flushed, in the order one feeds the next
        (remediation's commands are the history's input): each stops once its partitions are read to
        their end (``GroupRunner.stop_when_drained``), all within ``limit_s``. One still reading then is
        stopped and says so: what it had not read stays in Kafka behind its group's committed offsets, read
        at the group's next start (a live stream's agents keep writing, so ``up`` never waits on them)."""
        deadline = time.monotonic() + limit_s
        for c in consumers:
            if c.thread is None or not c.thread.is_alive():
                continue
            c.runner.stop_when_drained()
            c.thread.join(max(0.0, deadline - time.monotonic()))
            if c.thread.is_alive():
                log.warning("%s was still reading at shutdown (about %d record(s) behind); its group reads them at its next start",
                            c.name, c.runner.stats.lag)

    def summary(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for name, c in self.consumers.items():
            s = c.runner.stats
            row: dict[str, Any] = {"records": s.records_in, "outputs": s.outputs, "dead_letters": s.dead_letters,
                   "commits": s.commits, "redeliveries": s.redeliveries, "lag": s.lag}
            if name == "diagnose":
                row["diagnoses"] = c.handler.emitted
            elif name == "remediate":
                row["decisions"] = len(c.handler.decisions)
                row["commands_sent"] = sum(1 for d in c.handler.decisions if d.sent)
            elif name == "history":
                row["inserted"] = c.handler.sink.inserted
            if c.error is not None:
                row["error"] = f"{type(c.error).__name__}: {c.error}"
            out[name] = row
        return out
