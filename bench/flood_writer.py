"""A log flood for the agent's flood tests and bench: one Xid repeated at a set rate, other lines among it.

    python -m bench.flood_writer FILE --rate 100000 --seconds 5 --other-every 0.5

Appends ``rate`` lines a second of one Xid 95 line (in 10 ms batches, as a driver logging in a
loop does) to FILE and, every ``other_every`` seconds, one different line (an Xid 48 naming a
different process, letters only, so it never folds into another). Prints one JSON line at the
end: lines written, seconds, and each other line's name with the wall time it was written.
"""

from __future__ import annotations

import argparse
import json
import time

FLOOD = "[{t:12.6f}] NVRM: Xid (PCI:0000:3b:00): 95, pid=2345, name=python3, Uncontained: FBHUB. RST: No, D-RST: No"
OTHER = "[{t:12.6f}] NVRM: Xid (PCI:0000:86:00): 48, pid=77, name={name}, An uncorrectable double bit error"


def other_name(i: int) -> str:
    return "oth" + "".join(chr(97 + (i // 26 ** k) % 26) for k in range(3))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--rate", type=float, default=100_000.0, help="flood lines per second (default 100000)")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--other-every", type=float, default=0.5, help="seconds between other lines (default 0.5)")
    args = p.parse_args(argv)
    batch_s = 0.01
    per_batch = max(1, int(args.rate * batch_s))
    start = time.monotonic()
    next_other = start + args.other_every
    written, others = 0, []
    with open(args.file, "a") as f:
        due = start
        while True:
            now = time.monotonic()
            if now - start >= args.seconds:
                break
            t = 1000.0 + now - start
            f.write("\n".join(FLOOD.format(t=t) for _ in range(per_batch)) + "\n")
            written += per_batch
            if now >= next_other:
                name = other_name(len(others))
                f.write(OTHER.format(t=t, name=name) + "\n")
                f.flush()
                others.append((name, time.time()))
                next_other += args.other_every
            f.flush()
            due += batch_s
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    print(json.dumps({"flood_lines": written, "seconds": round(time.monotonic() - start, 3), "others": others}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
