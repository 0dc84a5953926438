"""A stand-in trainer for launcher tests: exits with the code given for its attempt (no torch)."""

import os
import sys

if __name__ == "__main__":
    codes = [int(c) for c in sys.argv[sys.argv.index("--codes") + 1].split(",")]
    attempt = int(os.environ["FAULTLENS_ATTEMPT"])
    raise SystemExit(codes[min(attempt, len(codes) - 1)])
