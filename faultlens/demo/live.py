"""The demo's live part: the broker (the given one, the registered one, or a new embedded one), the
pipeline's consumers, the simulated cluster's driver, the real trainer and the live view, started
in that order; the simulation run to its end (or to a signal); then every part that was started
stopped in reverse, and the signal handlers restored. What the run leaves is :class:`LiveOutcome`.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultlens.demo.driver import SimDriver
from faultlens.demo.state import DemoState
from faultlens.demo.trainer import TrainerJob
from faultlens.demo.view import LiveView
from faultlens.demo.wiring import PacedWrites, quicken_for_lockstep
from faultlens.events.signing import SigningKey
from faultlens.pipeline import Pipeline, PipelineOptions
from faultlens.simulator import SimulatedCluster
from faultlens.streams.broker import BrokerError, EmbeddedBroker, resolve_bootstrap
from faultlens.streams.config import KafkaSettings

TRAINER_WAIT_S = 120.0  # after the simulation, how long the real trainer may take to finish
HISTORY_DRAIN_S = 60.0  # at the end, how long the history may take to read the rest (it stops once read to the end)


@dataclass
class LiveOutcome:
    interrupted: bool
    trainer_events: list[dict[str, Any]] = field(default_factory=list)
    consumer_stats: dict[str, dict] = field(default_factory=dict)


class LiveRun:
    """One run of the demo's live part; :meth:`run` returns None when the pipeline never started."""

    def __init__(
        self, settings: KafkaSettings, options: PipelineOptions, state: DemoState, signing_key: SigningKey, notes: list[str]
    ):
        self.settings = settings
        self.options = options
        self.state = state
        self.signing_key = signing_key
        self.notes = notes
        self.interrupted = False
        self.broker: EmbeddedBroker | None = None
        self.pipeline: Pipeline | None = None
        self.history_pace: PacedWrites | None = None
        self.driver: SimDriver | None = None
        self.trainer: TrainerJob | None = None
        self.view: LiveView | None = None

    def run(self, args: Any, cluster: SimulatedCluster, duration: float, out_dir: Path, want_trainer: bool) -> LiveOutcome | None:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            pipeline = self._start_pipeline(lockstep=args.speed == 0)
            self.driver = SimDriver(
                self.settings, cluster, duration, args.speed, self.signing_key.verify_keys(), self.state, settled=self._settled
            )
            if not self.driver.start_listener():
                raise BrokerError("the simulated cluster's command listener could not start")
            send_forged(self.settings, self.state.sim_job, self.signing_key.key_id)
            if want_trainer:
                self.trainer = TrainerJob(
                    self.settings, self.signing_key, out_dir, nodes=args.trainer_nodes, procs_per_node=args.trainer_procs
                )
                self.trainer.start()
            self.view = LiveView(
                self.state,
                pipeline.stats,
                self.trainer.events if self.trainer else list,
                live=not args.no_live and not args.json and sys.stdout.isatty(),
            )
            self.view.start()
            self.driver.run()
            self._wait_for_trainer()
            if self.history_pace is not None:
                self.history_pace.release()  # what is left reaches the history as it comes
            time.sleep(1.0)  # the last commands' effects reach the history
        except (BrokerError, ValueError, OSError) as exc:
            print(f"faultlens demo: {exc}", file=sys.stderr)
            self.notes.append(str(exc))
        finally:
            outcome = self._stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return outcome

    def _on_signal(self, *_: Any) -> None:
        self.interrupted = True
        if self.driver is not None:
            self.driver.stop()

    def _start_pipeline(self, lockstep: bool) -> Pipeline:
        self.settings.bootstrap, self.broker = resolve_bootstrap(self.settings.bootstrap, start=True)
        pipeline = self.pipeline = Pipeline(self.settings, self.options).build()
        if lockstep:
            quicken_for_lockstep(pipeline.consumers["diagnose"].runner)
            # Paced, the history fell behind the 64-node demo at 20x (~1,100 events a second) and
            # the shutdown's 3 s drain then left ~4,000 records unread; in lockstep it gets ~300 a second.
            if "history" in pipeline.consumers:
                self.history_pace = PacedWrites(pipeline.consumers["history"].runner)
        pipeline.start()
        if not pipeline.wait_ready(90):
            raise BrokerError("the consumers did not join their groups within 90 s")
        return pipeline

    def _settled(self, published: int) -> bool:
        """Lockstep: the consumers read what the driver published and the commands sent came back."""
        assert self.pipeline is not None, "settled is asked only while the pipeline runs"
        c = self.pipeline.consumers
        sent = sum(1 for d in list(self.state.decisions) if d.sent and d.job == self.state.sim_job)
        listener = self.driver.listener if self.driver is not None else None
        return (
            c["diagnose"].runner.stats.records_in >= published
            and c["diagnose"].runner.stats.held == 0
            and c["remediate"].runner.stats.records_in >= c["diagnose"].handler.emitted
            and listener is not None
            and listener.obeyed + listener.refused >= sent
        )

    def _wait_for_trainer(self) -> None:
        if self.trainer is None or self.interrupted:
            return
        deadline = time.monotonic() + TRAINER_WAIT_S
        while not (self.trainer.finished() or self.interrupted) and time.monotonic() < deadline:
            time.sleep(0.5)
        if not self.trainer.finished():
            self.notes.append("the real trainer had not finished when the demo ended")

    def _stop_all(self) -> LiveOutcome | None:
        """Stop what was started, in reverse (the pipeline drains before the broker goes)."""
        if self.view is not None:
            self.view.stop()
        if self.driver is not None:
            self.driver.close()
        trainer_events = self.trainer.events() if self.trainer else []
        if self.trainer is not None:
            self.trainer.stop()
        if self.history_pace is not None:
            self.history_pace.release()
        # The history is the demo's report: its drain may take what a busy machine needs (it ends once read to the end).
        consumer_stats = self.pipeline.shutdown(drain_s=HISTORY_DRAIN_S) if self.pipeline is not None else {}
        if self.broker is not None:
            self.broker.stop()
        if self.pipeline is None:
            return None
        return LiveOutcome(self.interrupted, trainer_events, consumer_stats)


def send_forged(settings: KafkaSettings, job: str, key_id: str) -> None:
    """One evict that claims our key id but is signed with another key (what a node that stole no
    private key could at best produce): the cluster must refuse it, as a real trainer would."""
    from msgspec.structs import replace

    from faultlens.events import topics
    from faultlens.events.command import Command, CommandAction
    from faultlens.streams.producer import Producer

    now = time.time()
    unsigned = Command(
        job=job,
        action=CommandAction.EVICT,
        nodes=("n000",),
        issued_at=now,
        expires_at=now + 300,
        reason="forged by the demo: must be refused",
        key_id=key_id,
    )
    forged = replace(unsigned, signature=SigningKey.generate().sign(unsigned.canonical()))
    with Producer(settings) as producer:
        producer.send(topics.COMMANDS, job.encode(), forged.encode())
        producer.flush()
