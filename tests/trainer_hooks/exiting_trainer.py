"""A stand-in trainer for launcher tests: exits with the code given for its attempt (no torch);
``--sleep S`` first (a job that runs until it is cancelled); ``--until FILE``: first until the test
makes FILE (a job that runs until the test has seen what it waits for); ``--together DIR``: the ranks of an
attempt exit together, each once every rank of it has started (a file each in DIR), as ranks
obeying one command do at one step boundary. Started one after another, on a loaded machine they
were seconds apart, and the launcher saw a part of the job obey (test_launcher_broker)."""

import os
import sys
import time
from pathlib import Path


def arg(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def all_started(folder: Path, attempt: int, world: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"attempt{attempt}-rank{os.environ['RANK']}").touch()
    while len(list(folder.glob(f"attempt{attempt}-rank*"))) < world:
        time.sleep(0.01)  # the others are starting: the launcher's own watch bounds a stuck start


if __name__ == "__main__":
    codes = [int(c) for c in arg("--codes").split(",")]
    attempt = int(os.environ["FAULTLENS_ATTEMPT"])
    if (together := arg("--together")) is not None:
        all_started(Path(together), attempt, int(os.environ["WORLD_SIZE"]))
    if (sleep := arg("--sleep")) is not None:
        time.sleep(float(sleep))
    if (until := arg("--until")) is not None:
        while not Path(until).exists():
            time.sleep(0.05)
    raise SystemExit(codes[min(attempt, len(codes) - 1)])
