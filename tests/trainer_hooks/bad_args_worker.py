"""A training script given an option it does not take: argparse exits 2 in every rank at start.
Ranks after the first are slower to read their arguments (a busy machine, CI stop 67), so torch's
agent ends them with SIGTERM on rank 0's exit: the launcher sees codes [-15, 2], not [2]."""

import argparse
import os
import time

if __name__ == "__main__":
    if int(os.environ.get("RANK", "0")) > 0:
        time.sleep(30)  # torch's SIGTERM ends this long before: the test sees no 30 s wait
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.parse_args(["--stpes", "10"])
