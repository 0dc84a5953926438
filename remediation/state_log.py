"""The remediation state on a compacted Kafka topic (``remediation.state``, one record per job), for
deployments with more than one remediation member or no disk that outlives the pod.

The same interface as remediation.state.StateStore (``load`` / ``save``), so the Policy does not
care which it has. Each member publishes the jobs whose state a decision changed; a member that is
given a job's partition after a rebalance (or after another member died) reads the topic again and
takes every job's newest state (``touched``), so the ladder goes on from the rung it was on and the
spares already handed out stay handed out. A job idle for ``keep_s`` is forgotten, as in the file.
"""

from __future__ import annotations

import json
import logging
import time

from kafka.errors import KafkaError

from faultlens.events import topics
from faultlens.remediation.state import KEEP_S, JobState, StateError
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer
from faultlens.streams.reader import iter_topics

log = logging.getLogger(__name__)


class StateLog:
    """Load the whole changelog (newest record per job), save only the jobs that changed."""

    def __init__(self, settings: KafkaSettings, topic: str = topics.REMEDIATION_STATE, keep_s: float = KEEP_S,
                 read_timeout_s: float = 60.0):
        self.settings = settings
        self.topic = topic
        self.keep_s = keep_s
        self.read_timeout_s = read_timeout_s
        self.path = f"topic {topic}"  # named like the file store's path in the Policy's messages
        self.errors: list[str] = []
        self._published: dict[str, bytes] = {}  # job → the bytes the topic holds for it (ours or read)
        self._producer: Producer | None = None

    def load(self, ladder_config: dict[str, float]) -> dict[str, JobState]:
        latest: dict[str, bytes] = {}
        try:
            for m in iter_topics(self.settings, [self.topic], idle_s=0.5, timeout_s=self.read_timeout_s):
                if m.key is not None and m.value is not None:
                    latest[m.key.decode("utf-8", "replace")] = m.value
        except KafkaError as exc:
            self._report(f"remediation state {self.path} unreadable: {exc}; going on with the state in memory")
            return {}
        jobs: dict[str, JobState] = {}
        for job, raw in latest.items():
            try:
                jobs[job] = JobState.from_dict(job, json.loads(raw), ladder_config)
            except (ValueError, StateError) as exc:  # JSONDecodeError is a ValueError
                self._report(f"remediation state {self.path}: {exc}; that job starts from the bottom of its ladder")
        # Compaction keeps a job's last record forever: one idle for keep_s before the newest
        # decision in the log is forgotten (decision time, so replays and simulations age alike).
        newest = max((s.touched for s in jobs.values()), default=0.0)
        jobs = {job: s for job, s in jobs.items() if newest - s.touched <= self.keep_s}
        self._published.update({job: latest[job] for job in jobs})
        log.info("remediation state %s: %d job(s) read", self.path, len(jobs))
        return jobs

    def save(self, jobs: dict[str, JobState], now: float | None = None) -> None:
        """Publish the jobs whose state differs from what the topic holds. Raises OSError when the
        broker does not take them (the Policy logs it; the next save tries again)."""
        now = time.time() if now is None else now
        for job in [j for j, s in jobs.items() if now - s.touched > self.keep_s]:
            del jobs[job]
        changed = {}
        for job, state in jobs.items():
            raw = json.dumps(state.to_dict(), sort_keys=True).encode()
            if self._published.get(job) != raw:
                changed[job] = raw
        if not changed:
            return
        try:
            if self._producer is None:
                self._producer = Producer(self.settings)
            for job, raw in changed.items():
                self._producer.send(self.topic, job.encode(), raw)
            self._producer.flush(10.0)
        except (KafkaError, OSError) as exc:
            raise OSError(f"publishing {len(changed)} job state(s): {exc}") from exc
        self._published.update(changed)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None

    def _report(self, message: str) -> None:
        self.errors.append(message)
        log.error("%s", message)
