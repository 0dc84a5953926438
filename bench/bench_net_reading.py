"""What one NIC port sample (`net`/`sample`) costs to read: the general way and the typed way.

    .venv/bin/python bench/bench_net_reading.py TRACE.parquet [--repeat 5]

Takes the trace's `telemetry.net` messages (as `faultlens replay` would send them) and times, per
message, the best of ``--repeat`` passes over all of them:

- ``general``: events.envelope.decode (orjson into dicts, the envelope) then check_payload;
- ``typed``: events.net_reading.decode_net_message then check_payload (which takes the ports it
  read as checked);
- ``rule``: NetCounterRule.observe over the typed events, in trace order (a fresh rule per pass).

Prints one JSON line. Timings on a shared machine vary: compare runs taken side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faultlens.diagnosis.rules.net_counters import NetCounterRule  # noqa: E402
from faultlens.events import topics  # noqa: E402
from faultlens.events.envelope import decode  # noqa: E402
from faultlens.events.net_reading import CheckedPorts, decode_net_message  # noqa: E402
from faultlens.events.payloads import check_payload  # noqa: E402
from faultlens.streams.replay import trace_messages  # noqa: E402


def _best_us(work, items: list, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        work(items)
        best = min(best, time.perf_counter() - t)
    return best / len(items) * 1e6


def _read(read, check: bool):
    def run(raws: list[bytes]) -> None:
        for raw in raws:
            event = read(raw)
            if check:
                check_payload(event)
    return run


def _observe(events: list) -> None:
    rule = NetCounterRule()
    for e in events:
        rule.observe(e)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="a trace (Parquet) holding net/sample events")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    raws = [m.value for m in trace_messages(args.trace) if m.topic == topics.NET]
    if not raws:
        print(json.dumps({"error": "no net messages in the trace"}))
        return 1
    typed = [decode_net_message(r) for r in raws]
    print(json.dumps({
        "messages": len(raws), "mean_bytes": round(sum(map(len, raws)) / len(raws)),
        "typed_share": round(sum(type(e.data.get("ports")) is CheckedPorts for e in typed) / len(raws), 3),
        "general_decode_us": round(_best_us(_read(decode, False), raws, args.repeat), 1),
        "general_decode_check_us": round(_best_us(_read(decode, True), raws, args.repeat), 1),
        "typed_decode_us": round(_best_us(_read(decode_net_message, False), raws, args.repeat), 1),
        "typed_decode_check_us": round(_best_us(_read(decode_net_message, True), raws, args.repeat), 1),
        "rule_us": round(_best_us(_observe, typed, args.repeat), 1),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
