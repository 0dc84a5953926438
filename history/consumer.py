"""The Kafka edge of the history: a consumer group that stores what the topics carry.

The runner decodes (a message that does not decode is dead-lettered there), the handler turns a
polled batch into Arrow tables and writes them before the runner commits, so a crash re-delivers
a batch and the idempotent inserts drop what was already stored. Given the verify keys, the
handler checks each command's signature, so a forged copy of a real command never stays the
command on record (history.command_copies).
"""

from __future__ import annotations

import logging
from typing import Any

import duckdb

from faultlens.events import topics
from faultlens.events.action_record import ActionRecord
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, encode
from faultlens.events.fleet_record import MachineRecord
from faultlens.events.signing import VerifyKeys
from faultlens.events.topics import TELEMETRY_TOPICS
from faultlens.history.sink import HistorySink, Sampling, build_batch
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Outgoing
from faultlens.streams.runner.loop import FatalHandlerError, GroupRunner, Record, dead_letter

log = logging.getLogger(__name__)

GROUP = "faultlens-history"
TOPICS = (*TELEMETRY_TOPICS, topics.JOBS, topics.DIAGNOSES, topics.COMMANDS, topics.ACTIONS, topics.FLEET)
DECODERS = {topics.DIAGNOSES: Diagnosis.decode, topics.COMMANDS: Command.decode, topics.ACTIONS: ActionRecord.decode,
            topics.FLEET: MachineRecord.decode}


class StoreUnavailable(FatalHandlerError):
    """The DuckDB file cannot take writes (disk full, I/O error, closed).

    The store, not the record, is at fault: dead-lettering would throw good events away, so the
    runner stops before it commits and the batch is read again next time.
    """


def _raw(value: Any) -> bytes | None:
    if isinstance(value, Envelope):
        return encode(value)
    if isinstance(value, (Diagnosis, Command, ActionRecord, MachineRecord)):
        return value.encode()
    return None if value is None else repr(value).encode()


class HistoryHandler:
    """``handle(records)``: store a batch, return dead letters for the records the sink refused."""

    def __init__(self, sink: HistorySink, sampling: Sampling = Sampling(), group: str = GROUP,
                 keys: VerifyKeys | None = None):
        self.sink = sink
        self.sampling = sampling
        self.group = group
        self.keys = keys
        self.sampled_out = 0
        self.rejected = 0

    def handle(self, records: list[Record]) -> list[Outgoing]:
        batch = build_batch([r.value for r in records], self.sampling, keys=self.keys)
        try:
            self.sink.write(batch)
        except (duckdb.IOException, duckdb.ConnectionException, duckdb.FatalException) as exc:
            raise StoreUnavailable(f"history store unavailable: {exc}") from exc
        self.sampled_out += batch.sampled_out
        self.rejected += len(batch.rejected)
        out = []
        for rej in batch.rejected:
            r = records[rej.index]
            log.warning("history: cannot store %s@%d:%d: %s", r.topic, r.partition, r.offset, rej.reason)
            out.append(dead_letter(r.topic, r.partition, r.offset, r.key, _raw(r.value),
                                   f"history: {rej.reason}", self.group))
        return out


def history_runner(settings: KafkaSettings, conn: duckdb.DuckDBPyConnection, *, sampling: Sampling = Sampling(),
                   group: str = GROUP, topics: tuple[str, ...] = TOPICS, keys: VerifyKeys | None = None,
                   **runner_kwargs) -> tuple[GroupRunner, HistoryHandler]:
    """A GroupRunner (not started) that writes every record of ``topics`` into ``conn``; ``keys``:
    the commands' verify keys (None: no signature check, the first copy of a command id is kept)."""
    if keys is None:
        log.warning("history without a command verify key: a forged copy of a command that arrives before "
                    "the genuine one is kept as the command (pass --verify-key)")
    handler = HistoryHandler(HistorySink(conn), sampling, group, keys)
    runner = GroupRunner(settings, group, topics, handler, decoders=DECODERS, **runner_kwargs)
    return runner, handler
