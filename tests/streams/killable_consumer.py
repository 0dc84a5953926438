"""A consumer process for the crash test: processes records, records their ids, then hangs
inside the handler (before the runner can produce or commit) until it is SIGKILLed; or, mode
`finish`, reads on and stops once it read ``expect`` records (when given) or was idle for 4 s.
FAULTLENS_CLIENT picks the Kafka client, as for every command."""

import sys
import time
from pathlib import Path

from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner.loop import GroupRunner


def main() -> None:
    bootstrap, topic, group, out, mode = sys.argv[1:6]
    expect = int(sys.argv[6]) if len(sys.argv) > 6 else None
    out_path = Path(out)

    def handle(records):
        with out_path.open("a") as f:
            for r in records:
                f.write(r.value.id + "\n")
        if mode == "hang":
            time.sleep(3600)  # killed here: processed, not committed
        return []

    GroupRunner(KafkaSettings.load(overrides={"bootstrap": bootstrap}), group, [topic], handle).run(
        max_records_total=expect, idle_stop_s=4)


if __name__ == "__main__":
    main()
