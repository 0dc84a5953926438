"""The topic reads of the broker tests and benches (bench/testbed/topic_reads.py) decode only the
messages that can be of the job they read, and keep what decoding them all kept: the records on
the bus as their writers wrote them (tests/fixtures/records/record_bytes.jsonl: commands, action
records, diagnoses, a job named outside ASCII), envelopes of several jobs, and garbage."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.testbed.topic_reads import _of_job, job_needle
from faultlens.events.action_record import ActionRecord
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, InvalidEvent, decode, encode

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "record_bytes.jsonl"
ROWS = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()][1:]
ENVELOPES = [
    encode(Envelope(ts=1_790_000_000.0 + i, job=job, node=f"n{i}", source="gpu", kind="sample", data={"i": i}))
    for i, job in enumerate(["j", "j2", "job-7", "job-70", "other", "job été ✓"])
]
MESSAGES = [r["bytes"].encode() for r in ROWS] + ENVELOPES + [None, b"", b"not json", b'{"job": "j"}', b"[1]"]
JOBS = sorted({r["args"]["job"] for r in ROWS} | {"job-70", "other", "nobody", 'with"quote'})


def decoded_all(decoder, job):
    """What the reads kept before: every message decoded, then its job compared."""
    kept = []
    for i, raw in enumerate(MESSAGES):
        try:
            value = decoder(raw)
        except InvalidEvent:
            continue
        if job is None or value.job == job:
            kept.append(i)
    return kept


@pytest.mark.parametrize(
    "decoder", [decode, Diagnosis.decode, Command.decode, ActionRecord.decode], ids=["envelope", "diagnosis", "command", "action"]
)
@pytest.mark.parametrize("job", [None, *JOBS])
def test_the_look_before_decoding_keeps_what_decoding_every_message_kept(decoder, job):
    needle = job_needle(job)
    kept = [i for i, raw in enumerate(MESSAGES) if _of_job(decoder, raw, job, needle) is not None]
    assert kept == decoded_all(decoder, job)


def test_only_the_messages_that_can_be_of_the_job_are_decoded():
    asked = []

    def counting(raw):
        asked.append(raw)
        return decode(raw)

    kept = [raw for raw in MESSAGES if _of_job(counting, raw, "job-7", job_needle("job-7")) is not None]
    assert len(kept) == 1
    # The job's envelope and the fixture's records of job-7, which Envelope cannot read; and the
    # tombstone, left to the decoder to refuse as before.
    assert len(asked) == 1 + sum(r["args"]["job"] == "job-7" for r in ROWS) + 1
    assert job_needle("job été ✓") is None and job_needle('with"quote') is None  # such names: every message decoded
