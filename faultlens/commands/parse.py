"""faultlens parse: classify the lines of a kernel or trainer/NCCL log, one JSON event per finding."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import BinaryIO, Iterator

import orjson
from tqdm import tqdm

from faultlens.events.envelope import InvalidEvent, encode
from faultlens.parsing.line import ParsedLine
from faultlens.parsing.registry import guess_source, parser_for, to_envelope
from faultlens.parsing.rules import RuleError, load

log = logging.getLogger(__name__)

HELP = "classify log lines (kernel or trainer/NCCL): one JSON event per recognised line"
DESCRIPTION = """\
Reads FILE ('-' for stdin): a kernel log (dmesg in any time format, /dev/kmsg, syslog, journald)
or a trainer / NCCL log (torchrun output, NCCL WARN lines, ProcessGroupNCCL watchdog, Python
tracebacks). Prints one JSON event (an envelope: v, id, ts, job, node, source, kind, data) per
recognised record; data carries the fault class (`fault`) and the recommended first action
(`action`). Lines that say nothing wrong print nothing. A summary (lines, recognised, skipped,
garbled) goes to stderr at the end.

The source is guessed from the first lines when --source is not given. An event's ts is the
line's own clock when it has a wall-clock stamp, else the file's modification time.

Environment: FAULTLENS_JOB, FAULTLENS_NODE set the defaults of --job and --node.

Examples:
  faultlens parse /var/log/kern.log
  dmesg --time-format iso | faultlens parse - --source kernel --job llm-7b
  faultlens parse rank3.log --source trainer | jq -c 'select(.data.action != "none")'
  faultlens parse kern.log --rules site-rules.toml
  faultlens parse kern.log --unrecognised missed.jsonl   # then turn a frequent template into a rule
"""

# Lines read before the source is guessed.
GUESS_LINES = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", nargs="?", help="log file to read, '-' for stdin")
    parser.add_argument("--train-model", action="store_true",
                        help="retrain the shipped line model from tests/fixtures/log_corpus and the tables' examples, then exit")
    parser.add_argument(
        "--source",
        choices=("kernel", "nccl", "trainer"),
        default=None,
        help="which parser (trainer is an alias of nccl); guessed from the first lines when omitted",
    )
    parser.add_argument(
        "--rules", action="append", default=[], metavar="FILE",
        help="a TOML line catalogue of your own (format: parsing/rules.toml), tried after the shipped rules; repeatable",
    )
    parser.add_argument(
        "--unrecognised", metavar="FILE", default=None,
        help="mine the alarming lines no rule took (error, fail, fault, timeout, abort; kernel priority err or worse) into "
        "Drain3 templates and write the top ones to FILE as JSON lines (count, template, example); '-' for stderr",
    )
    parser.add_argument("--top", type=int, default=20, help="how many templates --unrecognised writes (default 20)")
    parser.add_argument("--job", default=os.environ.get("FAULTLENS_JOB", "unknown"), help="job id of the events (default: unknown)")
    parser.add_argument(
        "--node", default=os.environ.get("FAULTLENS_NODE") or socket.gethostname(), help="node name of the events (default: this host)"
    )


def _open(path: str) -> tuple[BinaryIO, float, int | None]:
    """(stream, fallback ts, size for the progress bar); raises OSError with a readable reason."""
    if path == "-":
        return sys.stdin.buffer, time.time(), None
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{path} is a directory")
    stat = p.stat()
    return p.open("rb"), stat.st_mtime, stat.st_size


def _lines(stream: BinaryIO, bar: tqdm) -> Iterator[str]:
    for raw in stream:
        bar.update(len(raw))
        yield raw.decode("utf-8", errors="replace")


def _event_id(node: str, path: str, lineno: int, index: int) -> str:
    # Deterministic: parsing the same file twice yields the same ids, so dedup downstream holds.
    return hashlib.blake2b(f"{node}|{path}|{lineno}|{index}".encode(), digest_size=16).hexdigest()


def run(args: argparse.Namespace) -> int:
    if args.train_model:
        from faultlens.parsing.line_train import main as train_main

        return train_main()
    if args.file is None:
        print("faultlens parse: FILE is required (or --train-model)", file=sys.stderr)
        return 2
    try:
        rules = load(args.rules)
    except RuleError as exc:
        print(f"faultlens parse: {exc}", file=sys.stderr)
        return 2
    try:
        stream, fallback_ts, size = _open(args.file)
    except OSError as exc:
        print(f"faultlens parse: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    path = args.file if args.file == "-" else str(Path(args.file).resolve())
    out = sys.stdout.buffer
    written = 0
    with stream, tqdm(total=size, unit="B", unit_scale=True, desc="parse", disable=None, file=sys.stderr, leave=False) as bar:
        lines = _lines(stream, bar)
        head = list(itertools.islice(lines, GUESS_LINES))
        source = args.source or guess_source(head)
        if not args.source:
            log.info("source guessed from the first %d lines: %s", len(head), source)
        miner = None
        if args.unrecognised:
            from faultlens.parsing.unrecognised import UnrecognisedMiner  # Drain3 only when asked for

            miner = UnrecognisedMiner()
        parser = parser_for(source, rules, (lambda msg: miner.add(msg, source)) if miner else None)

        def emit(parsed: list[ParsedLine], lineno: int) -> int:
            n = 0
            for i, p in enumerate(parsed):
                ts = p.ts if p.ts is not None else fallback_ts
                try:
                    env = to_envelope(p, job=args.job, node=args.node, ts=ts, event_id=_event_id(args.node, path, lineno, i))
                except InvalidEvent:
                    # A line stamped outside 2000..2100 (a clock reset): keep the event, use the file's time.
                    env = to_envelope(p, job=args.job, node=args.node, ts=fallback_ts, event_id=_event_id(args.node, path, lineno, i))
                out.write(encode(env) + b"\n")
                n += 1
            return n

        lineno = 0
        for lineno, line in enumerate(itertools.chain(head, lines), 1):
            written += emit(parser.feed(line), lineno)
        written += emit(parser.flush(), lineno + 1)
    out.flush()
    s = parser.stats
    print(
        f"faultlens parse: {s.lines} lines, {s.recognised} recognised ({s.benign} known benign, {s.by_subsystem} by subsystem, "
        f"{s.by_model} by the line model), {s.skipped} skipped ({s.alarming} of them alarming: "
        f"no rule took them{'' if miner else '; --unrecognised FILE shows their templates'}), {s.garbled} garbled; "
        f"{written} events (source {source})",
        file=sys.stderr,
    )
    if miner is not None:
        return write_templates(args.unrecognised, miner.top(args.top))
    return 0


def write_templates(path: str, templates: list) -> int:
    """The mined templates as JSON lines to ``path`` ('-': stderr); 1 when it cannot be written."""
    lines = [orjson.dumps(t.as_dict()).decode() for t in templates]
    if path == "-":
        for line in lines:
            print(line, file=sys.stderr)
        return 0
    try:
        Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    except OSError as exc:
        print(f"faultlens parse: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
