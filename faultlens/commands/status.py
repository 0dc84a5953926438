"""faultlens status: every job's state now, from the bus (read-only, no consumer group)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

HELP = "every job's state now, from the bus: running or ended, its round and nodes, its newest step, last diagnosis and command"
DESCRIPTION = """\
Reads the job-level topics from their start (jobs, telemetry.train, telemetry.nccl, diagnoses,
commands) without a consumer group, and prints one line per job seen within --since seconds:
running or how it ended, its attempt and nodes (from its newest round), its newest step and how
long ago it came, how many worker crashes were reported, its last diagnosis and its last command.
--json: one JSON object per job. Follow one job as it goes: `faultlens tail JOB`."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faultlens.streams.config import add_kafka_arguments

    parser.add_argument("--since", type=float, default=3600.0,
                        help="jobs with anything within this many seconds (default 3600; 0: every job)")
    parser.add_argument("--json", action="store_true", help="one JSON object per job")
    add_kafka_arguments(parser)


@dataclass
class JobStatus:
    job: str
    state: str = "running"
    attempt: int = 0
    nodes: list[str] = field(default_factory=list)
    ranks: int | None = None
    step: int | None = None
    step_ts: float | None = None
    last_ts: float = 0.0
    crashes: int = 0
    diagnosis: str | None = None
    command: str | None = None

    def fold(self, line: dict[str, Any]) -> None:
        """One line of faultlens.commands.tail.describe (they come in any order across topics)."""
        what, ts = line["what"], float(line["ts"])
        self.last_ts = max(self.last_ts, ts)
        if what == "topology":
            self.nodes, self.ranks = line["nodes"], line["ranks"]
        elif what == "restart":
            self.attempt, self.state = max(self.attempt, int(line.get("attempt") or 0)), "running"
        elif what == "end":
            self.state = f"ended: {line.get('reason')}"
            self.nodes = line.get("nodes") or self.nodes
        elif what == "step" and (self.step_ts is None or ts >= self.step_ts):
            self.step, self.step_ts = line.get("step"), ts  # an end stays an end: only a restart reopens
        elif what == "worker_failed":
            self.crashes += 1
        elif what == "diagnosis":
            self.diagnosis = f"{line['fault']} -> {line['action']} {','.join(line['nodes']) or '-'}"
        elif what == "command":
            self.command = f"{line['action']} {','.join(line['nodes']) or '(job)'}: {line['reason'][:80]}"


def statuses(lines: list[dict[str, Any]]) -> dict[str, JobStatus]:
    """Every job's status from the view's lines (pure)."""
    out: dict[str, JobStatus] = {}
    for line in sorted(lines, key=lambda entry: entry["ts"]):
        out.setdefault(line["job"], JobStatus(line["job"])).fold(line)
    return out


def run(args: argparse.Namespace) -> int:
    from faultlens.commands.tail import SOURCES, describe
    from faultlens.streams.connect import connected
    from faultlens.streams.reader import iter_topics

    with connected(args, SOURCES, create_topics=False) as settings:
        lines = [line for m in iter_topics(settings, SOURCES, idle_s=1.0)
                 if (line := describe(m.topic, m.value)) is not None]
    now = time.time()
    jobs = [s for s in statuses(lines).values() if not args.since or now - s.last_ts <= args.since]
    if not jobs:
        print(f"faultlens status: no job on the bus within {args.since:.0f} s", file=sys.stderr)
        return 0
    for s in sorted(jobs, key=lambda s: -s.last_ts):
        if args.json:
            sys.stdout.write(json.dumps(asdict(s)) + "\n")
            continue
        age = f"{now - s.step_ts:.0f} s ago" if s.step_ts is not None else "-"
        print(f"{s.job}  {s.state}  attempt {s.attempt}  nodes {','.join(s.nodes) or '?'}"
              f"  step {s.step if s.step is not None else '-'} ({age})  crashes {s.crashes}"
              f"  diagnosis {s.diagnosis or '-'}  command {s.command or '-'}")
    return 0
