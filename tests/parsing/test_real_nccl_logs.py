"""Real NCCL / c10d log lines from torch 2.11 + NCCL 2.28.9 on an H100 (tests/fixtures/real_gpu/gpu40/,
docs/real_gpu.md "2026-11-26"): a healthy world-size-1 NCCL job and a real watchdog timeout.

Every line is counted (recognised, skipped or garbled: never dropped), the healthy job's hundreds
of NCCL INFO and c10d INFO lines make no event, and the timeout gives the collective's number,
op, sizes and progress the parser claims to read."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultlens.parsing.trainer_log import TrainerLogParser

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_gpu" / "gpu40"
HEALTHY = ("nccl_fr.stderr.log", "nccl_fr.stdout.log", "trainer.stdout.log", "nccl_timeout.stdout.log")


def parse(name: str) -> tuple[TrainerLogParser, list, int]:
    parser = TrainerLogParser()
    lines = (FIXTURES / name).read_text().splitlines()
    events = [e for line in lines for e in parser.feed(line)] + parser.flush()
    return parser, events, len(lines)


@pytest.mark.parametrize("name", HEALTHY + ("nccl_timeout.stderr.log",))
def test_every_real_line_is_counted_once(name):
    parser, _, n = parse(name)
    s = parser.stats
    assert s.lines == n > 40
    assert s.recognised + s.skipped + s.garbled == n and s.garbled == 0


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_nccl_job_logs_no_fault(name):
    _, events, _ = parse(name)
    assert events == []


def test_the_nccl_info_lines_are_the_real_init_chatter():
    text = (FIXTURES / "nccl_fr.stdout.log").read_text()
    # What NCCL prints on stdout (not stderr) at INFO: the version and the rank/device of each communicator.
    assert "NCCL INFO NCCL version 2.28.9+cuda13.0" in text
    assert "ncclCommInitRankConfig comm" in text and "rank 0 nranks 1 cudaDev 0" in text


def test_a_real_watchdog_timeout_gives_the_collective_and_the_progress():
    _, events, _ = parse("nccl_timeout.stderr.log")
    assert {e.kind for e in events} == {"nccl_timeout"}
    assert {(e.data["rank"], e.data["seq"]) for e in events} == {(0, 2)}
    caught = events[0].data
    assert (caught["op"], caught["timeout_ms"], caught["elapsed_ms"]) == ("ALLREDUCE", 3000, 3067)
    assert (caught["numel_in"], caught["numel_out"]) == (65536, 65536)
    # torch 2.11's wording of the progress line ("failure detected by watchdog at work sequence id: 2
    # PG status: last enqueued work: 2, last completed work: 1") was skipped before this capture.
    [progress] = [e.data for e in events if "last_completed" in e.data]
    assert (progress["seq"], progress["last_enqueued"], progress["last_completed"]) == (2, 2, 1)
    # The watchdog's text comes three times (caught, thread terminated, std::terminate's what()):
    # one incident for diagnosis.rules.comms.FirstFailingRank, which keys on the job.
    assert sum(1 for e in events if e.data.get("elapsed_ms") == 3067) == 3
