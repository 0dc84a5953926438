"""faultlens tail JOB: one job, live, from the bus (the view `faultlens status` folds)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

HELP = "follow one job live on the bus: its rounds, steps (sampled), worker crashes, diagnoses, commands and acks"
DESCRIPTION = """\
Prints one JSON line per thing that happens to JOB, as it happens (with --from-start, from the
beginning of the topics first): a start or restart of its workers and its placement (`jobs`), its
steps (one line per --steps-every seconds: the newest step and the ranks that reported), its
checkpoints and its ranks' command acks (`telemetry.train`), what `faultlens run` or a node agent
reported of a crash (`telemetry.nccl`), the diagnoses about it and the commands sent to it. Ends at
the job's end (`jobs`/`end`), after --duration seconds, or on Ctrl-C. Reads without a consumer
group: it takes nothing from anyone. `faultlens status` prints every job's state at once."""

SOURCES = ("jobs", "telemetry.train", "telemetry.nccl", "diagnoses", "commands")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faultlens.streams.config import add_kafka_arguments

    parser.add_argument("job", help="the job's id (as `faultlens run --job` or the node agent's --job named it)")
    parser.add_argument("--from-start", action="store_true", help="first what the topics already hold")
    parser.add_argument("--steps-every", type=float, default=10.0,
                        help="seconds between two step lines (default 10; 0: every step)")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    add_kafka_arguments(parser)


def describe(topic: str, raw: bytes | None, job: str | None = None) -> dict[str, Any] | None:
    """One record as a line: None when it is not ``job``'s (any job's when None) or not readable
    (a malformed record is the diagnosis side's dead letter, not this view's business)."""
    from faultlens.events.command import Command
    from faultlens.events.diagnosis_record import Diagnosis
    from faultlens.events.envelope import InvalidEvent, decode

    try:
        if topic == "diagnoses":
            d = Diagnosis.decode(raw)
            line = {"what": "diagnosis", "job": d.job, "ts": d.ts, "fault": str(d.fault), "action": str(d.action),
                    "nodes": list(d.nodes), "ranks": list(d.ranks), "detail": d.detail[:300]}
        elif topic == "commands":
            c = Command.decode(raw)
            line = {"what": "command", "job": c.job, "ts": c.issued_at, "action": str(c.action), "nodes": list(c.nodes),
                    "reason": c.reason[:300], "command_id": c.id}
        else:
            e = decode(raw)
            line = {"what": e.kind, "job": e.job, "ts": e.ts, "node": e.node, **_event_data(e.source, e.kind, e.data)}
    except (InvalidEvent, ValueError, TypeError, KeyError, AttributeError):
        return None
    return line if job is None or line["job"] == job else None


def _event_data(source: str, kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "topology":
        ranks = data.get("ranks") or []
        return {"nodes": list(dict.fromkeys(r.get("node") for r in ranks)), "ranks": len(ranks),
                "tp": data.get("tp"), "pp": data.get("pp"), "dp": data.get("dp")}
    if source in ("job", "train"):
        keep = ("reason", "attempt", "resume", "resume_why", "nodes_out", "nodes_in", "nodes", "command_id",
                "rank", "step", "loss", "grad_norm", "path", "action", "obeyed")
        return {k: data[k] for k in keep if k in data}
    return {"rank": data.get("rank"), "fault": data.get("fault"), "action": data.get("action"),
            "line": str(data.get("line") or "").splitlines()[-1][:300] if data.get("line") else None}


class StepSampler:
    """At most one step line per ``every`` seconds of event time per job: the newest step and the
    ranks that reported since the last line (a job of 1,000 ranks steps 1,000 times a step)."""

    def __init__(self, every: float):
        self.every = every
        self._due: dict[str, float] = {}
        self._ranks: dict[str, set] = {}

    def admit(self, line: dict[str, Any]) -> dict[str, Any] | None:
        job = line["job"]
        self._ranks.setdefault(job, set()).add(line.get("rank"))
        if line["ts"] < self._due.get(job, float("-inf")):
            return None
        self._due[job] = line["ts"] + self.every
        ranks, self._ranks[job] = self._ranks[job], set()
        return {**line, "ranks_reporting": len(ranks)}


def run(args: argparse.Namespace) -> int:
    from faultlens.streams.connect import connected
    from faultlens.streams.reader import iter_topics

    steps = StepSampler(args.steps_every)
    seen: set[tuple[str, int, int]] = set()
    printed = 0

    def show(line: dict[str, Any] | None) -> bool:
        """Print a line; True at the job's end."""
        if line is not None and line["what"] == "step":
            line = steps.admit(line)
        if line is None:
            return False
        nonlocal printed
        printed += 1
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        return line["what"] == "end"

    forever = 365 * 86400.0
    with connected(args, SOURCES, create_topics=False) as settings:
        # Said once on stderr: a job that is quiet (or misnamed) would otherwise print nothing at all.
        print(f"faultlens tail: following job {args.job} on {settings.bootstrap} until its end"
              f"{f' or {args.duration:g} s' if args.duration else ''} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        if args.from_start:
            # What the topics hold, in time order (a read comes topic by topic): the job's end may
            # sit in `jobs` ahead of the diagnoses that came before it.
            backlog = []
            for m in iter_topics(settings, SOURCES, idle_s=1.0):
                seen.add((m.topic, m.partition, m.offset))
                if (line := describe(m.topic, m.value, args.job)) is not None:
                    backlog.append(line)
            if any([show(line) for line in sorted(backlog, key=lambda entry: entry["ts"])]):
                return 0
        # One long read: a quiet job does not end the tail, only its end, --duration or Ctrl-C.
        # From the start again when asked (what came between the two reads is not lost), skipping
        # what the backlog printed.
        for m in iter_topics(settings, SOURCES, idle_s=forever, from_beginning=args.from_start,
                             timeout_s=args.duration or forever):
            if (m.topic, m.partition, m.offset) not in seen and show(describe(m.topic, m.value, args.job)):
                return 0
    if not printed:
        print(f"faultlens tail: nothing from job {args.job} (`faultlens status --since S` lists the jobs on the bus)",
              file=sys.stderr)
    return 0
