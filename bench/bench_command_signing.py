"""What Ed25519 command signing costs, next to the HMAC-SHA256 it replaced.

    .venv/bin/python -m bench.bench_command_signing [--n 5000]

One JSON line per operation with the mean and p99 in microseconds, on a realistic evict command
(two nodes, standby replacements in params):
- ``hmac_sign`` / ``hmac_verify``: the old scheme (for comparison only; nothing uses it now);
- ``ed25519_sign``: what the remediation consumer pays per command;
- ``ed25519_verify``: what each receiver pays per command addressed to it;
- ``screen_in_memory``: a receiver's whole gate on the topic's bytes (decode, verify, checks);
- ``screen_persisted``: the same with the command memory file rewritten atomically (fsync) per obeyed
  command, with every earlier id still unexpired (the file's worst case; a real receiver keeps
  only the ids of the last 10 minutes).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from msgspec.structs import replace

from faultlens.events.command import Command
from faultlens.events.command_memory import CommandMemory
from faultlens.events.command_screen import CommandScreen
from faultlens.events.signing import SigningKey


def _timed(fn, n: int) -> dict:
    samples = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples[i] = time.perf_counter() - t0
    us = samples * 1e6
    return {"n": n, "mean_us": round(float(us.mean()), 2), "p99_us": round(float(np.percentile(us, 99)), 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=5000, help="operations per measurement (default 5000)")
    args = p.parse_args(argv)
    key = SigningKey.generate()
    keys = key.verify_keys()
    now = time.time()
    base = Command(job="train-7", action="evict", nodes=("n004", "n017"), issued_at=now, expires_at=now + 300,
                   reason="gpu_lost: Xid 79 on n004; nvlink on n017", diagnosis_id="d" * 32,
                   params={"replacements": ["s000", "s001"], "standby_shortfall": 0})
    canonical = base.signed(key).canonical()
    secret = b"s" * 32
    mac = hmac.new(secret, canonical, hashlib.sha256).hexdigest()
    signed = base.signed(key)
    results = {
        "hmac_sign": _timed(lambda i: hmac.new(secret, canonical, hashlib.sha256).hexdigest(), args.n),
        "hmac_verify": _timed(lambda i: hmac.compare_digest(mac, hmac.new(secret, canonical, hashlib.sha256).hexdigest()), args.n),
        "ed25519_sign": _timed(lambda i: base.signed(key), args.n),
        "ed25519_verify": _timed(lambda i: signed.verify(keys), args.n),
    }
    raws = [replace(base, id=f"c{i}").signed(key).encode() for i in range(args.n)]
    in_memory = CommandScreen(keys, "train-7", "n004")
    results["screen_in_memory"] = _timed(lambda i: in_memory.screen(raws[i], now + 1), args.n)
    with tempfile.TemporaryDirectory() as tmp:
        # Worst case for the file: every id still unexpired, so each write rewrites all of them.
        screen = CommandScreen(keys, "train-7", "n004", memory=CommandMemory(Path(tmp) / "seen.jsonl"))
        results["screen_persisted"] = _timed(lambda i: screen.screen(raws[i], now + 1), args.n)
    for name, r in results.items():
        print(json.dumps({"op": name, **r}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
