"""Print what the NVML sampler reads on this machine, as JSON lines (for checking on a GPU node).

    python -m tools.nvml_probe --seconds 5 [--interval 1] [--no-xid]

One line per `gpu`/`sample` (and `gpu`/`lost`, `gpu`/`xid` events as they come), each the event's
JSON, then a summary line with the fields that read null on every GPU (unsupported by this
driver / GPU). Exits 1 with a one-line message when there is no NVML.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

from collectors.nvml_sampler import NvmlSampler, NvmlUnavailable
from streams.events import Envelope


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.nvml_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to sample (default 5)")
    parser.add_argument("--interval", type=float, default=1.0, help="sample interval in seconds (default 1)")
    parser.add_argument("--no-xid", action="store_true", help="do not listen for NVML Xid events")
    args = parser.parse_args(argv)

    nulls: dict[str, bool] = {}
    lock = threading.Lock()

    def publish(event: Envelope) -> None:
        with lock:
            print(json.dumps(event.to_dict()), flush=True)
            if event.kind == "sample":
                for gpu in event.data["gpus"]:
                    for key, value in gpu.items():
                        nulls[key] = nulls.get(key, True) and value is None

    sampler = NvmlSampler(job="nvml-probe", node=socket.gethostname(), interval_s=args.interval, publish=publish,
                          xid_events=not args.no_xid)
    stop = threading.Event()
    timer = threading.Timer(args.seconds, stop.set)
    timer.start()
    start = time.monotonic()
    try:
        sampler.run(stop)
    except NvmlUnavailable as exc:
        print(f"nvml_probe: {exc}", file=sys.stderr)
        return 1
    finally:
        timer.cancel()
    print(json.dumps({"summary": True, "samples": sampler.samples, "seconds": round(time.monotonic() - start, 2),
                      "lost_gpus": sorted(sampler.lost), "always_null": sorted(k for k, v in nulls.items() if v)}),
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
