"""A stand-in trainer for launcher tests: exits with the code given for its attempt (no torch);
``--sleep S`` first (a job that runs until it is cancelled)."""

import os
import sys
import time

if __name__ == "__main__":
    codes = [int(c) for c in sys.argv[sys.argv.index("--codes") + 1].split(",")]
    attempt = int(os.environ["FAULTLENS_ATTEMPT"])
    if "--sleep" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--sleep") + 1]))
    raise SystemExit(codes[min(attempt, len(codes) - 1)])
