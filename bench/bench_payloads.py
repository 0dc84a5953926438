"""CPU cost of the payload check every consumer runs at its intake (events.payloads.check_payload).

    .venv/bin/python -m bench.bench_payloads [--repeat 5]

The events are what the real producers make: the simulator's every-class trace (8 nodes x 4
GPUs, the GPU / NIC samples, steps, beats, raw lines and job records), the log parsers over the
real-line corpus (tests/fixtures/log_corpus, read as data) and the node stage's output on the
trace (windows, findings, watermarks, the bundles' events). Each is encoded once; a run decodes
every message (events.envelope.decode, a fresh event: the typed payload is kept on the event)
and checks it. Best of ``--repeat`` runs; prints one JSON line per group of kinds: events, and
microseconds per event of the decode alone and of decode plus check (their difference is the
check's cost).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.events.bundle import decode_bundled
from faultlens.events.envelope import Envelope, decode, encode
from faultlens.events.payloads import check_payload
from faultlens.parsing.registry import parser_for
from faultlens.simulator import SIM_CLASSES, SimConfig, simulate
from faultlens.streams.runner.loop import Record

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "log_corpus"
T = 1_790_000_000.0


def _corpus_events() -> list[Envelope]:
    out = []
    for path in sorted(CORPUS.rglob("*.jsonl")):
        for text in path.read_text(encoding="utf-8").splitlines():
            if not text.strip():
                continue
            row = json.loads(text)
            parser = parser_for(row.get("source", "kernel"))
            lines = row["lines"] if "lines" in row else [row["line"]]
            parsed = [p for line in lines for p in parser.feed(line)] + parser.flush()
            out += [Envelope(ts=T, job="j", node="n0", source=p.source, kind=p.kind, data=p.data) for p in parsed]
    return out


def _stage_events(trace: list[Envelope]) -> list[Envelope]:
    handler = NodeStageHandler()
    records = [Record("telemetry", 0, i, None, e, 0) for i, e in enumerate(trace)]
    outgoing = []
    for i in range(0, len(records), 500):
        outgoing += handler.handle(records[i:i + 500])
    outgoing += handler.flush()
    outgoing += handler.watermarks([0])(T)
    out: list[Envelope] = []
    for o in outgoing:
        read = decode_bundled(o.value)
        out += [read] if isinstance(read, Envelope) else list(read.events)
    return out


def _group(event: Envelope) -> str:
    if event.source in ("kernel", "nccl") and event.kind != "line":
        return "parsed_log"
    if event.source in ("summary", "job"):
        return "summary_job"
    return f"{event.source}/{event.kind}"


def _best(raws: list[bytes], check: bool, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        if check:
            for raw in raws:
                check_payload(decode(raw))
        else:
            for raw in raws:
                decode(raw)
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    trace = list(simulate(SimConfig(nodes=8, gpus=4, seed=7, job="job-bench"), faults=len(SIM_CLASSES)).events())
    groups: dict[str, list[bytes]] = defaultdict(list)
    for event in trace + _corpus_events() + _stage_events(trace):
        groups[_group(event)].append(encode(event))
    groups["all"] = [raw for name in list(groups) for raw in groups[name]]
    for name, raws in sorted(groups.items()):
        decode_s = _best(raws, False, args.repeat)
        checked_s = _best(raws, True, args.repeat)
        print(json.dumps({"group": name, "events": len(raws), "decode_us": round(decode_s / len(raws) * 1e6, 2),
                          "decode_check_us": round(checked_s / len(raws) * 1e6, 2),
                          "check_us": round((checked_s - decode_s) / len(raws) * 1e6, 2)}))


if __name__ == "__main__":
    main()
