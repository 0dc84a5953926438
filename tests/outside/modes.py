"""Run one trace the four ways a user would, through the CLI only, and compare what each says.

    python -m tests.outside.modes TRACE [--modes offline live backlog group] [--speed 40]

- offline: `faultlens analyze TRACE`;
- live: `faultlens diagnose` running, then `faultlens replay TRACE --speed K` into it;
- backlog: `faultlens replay` first, then `faultlens diagnose` reads it all after the fact;
- group: three `faultlens diagnose --group G` started together, then the replay (what an outside
  check's brief says; one holds the group's lease and acts, the others stand by: docs/deploying.md);
- split: three `--stage node` members and three `--stage job` members (two groups), then the replay:
  the documented way to run several members (docs/deploying.md).

Every broker mode starts its own `faultlens broker` (a private $FAULTLENS_HOME, so no other
broker on the machine is found) and reads the `diagnoses` topic back with `faultlens record
--topics diagnoses`. A diagnosis is compared by what it decided: job, fault, action, nodes, group.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

FAULTLENS = [sys.executable, "-m", "faultlens"]
MODES = ("offline", "live", "backlog", "group", "split")
IDLE_STOP_S = 90   # past the 30 s grace, so the wall clock can move a quiet job's time by a minute
# The group's check is that one of three members reads it all and the others stand by (silence is
# not compared there, the live mode's 90 s are what judge the wall clock past a stream's end): an
# idle stop below the grace, so nothing moves a job's time past its last event, and the active
# member stops once it read its partitions to their ends (streams/idle_stop.py), handing on what
# it holds as at any stop. A standby without the lease exits after it too: it stands by through
# the replay's first 20 s (switch_wave at 40x: 15 s of events), not to the end.
GROUP_IDLE_STOP_S = 20  # the backlog's too: all of it is in before the member starts, silence is not compared

Key = tuple[str, str, str, tuple[str, ...], str]
T = TypeVar("T")


def key(d: dict) -> Key:
    return (d["job"], d["fault"], d["action"], tuple(sorted(d["nodes"])), d.get("group") or "")


def acting(diagnoses: Iterable[dict]) -> set[Key]:
    """What `faultlens check` calls verdicts: neither record-only nor a request for stacks."""
    return {key(d) for d in diagnoses if d["action"] not in ("none", "capture_stacks")}


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "FAULTLENS_HOME": str(home), "FAULTLENS_LOG_LEVEL": "WARNING"}


@contextmanager
def _broker(home: Path):
    proc = subprocess.Popen([*FAULTLENS, "broker"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=_env(home), text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        yield json.loads(line)["bootstrap"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _diagnose(bootstrap: str, home: Path, group: str, log: Path, idle_stop: float,
              stage: str = "all") -> subprocess.Popen:
    return subprocess.Popen([*FAULTLENS, "diagnose", "--bootstrap", bootstrap, "--group", group, "--stage", stage,
                             "--idle-stop", str(idle_stop)], stdout=subprocess.DEVNULL,
                            stderr=log.open("w"), env=_env(home))


def _replay(bootstrap: str, home: Path, trace: Path, speed: float) -> None:
    subprocess.run([*FAULTLENS, "replay", str(trace), "--bootstrap", bootstrap, "--speed", str(speed),
                    "--no-progress"], check=True, stdout=subprocess.DEVNULL, env=_env(home))


def _recorded(bootstrap: str, home: Path, out: Path) -> list[dict]:
    trace = out / "diagnoses.parquet"
    subprocess.run([*FAULTLENS, "record", "--bootstrap", bootstrap, "--topics", "diagnoses", "--out",
                    str(trace), "--idle", "5", "--no-progress"], check=True, stdout=subprocess.DEVNULL,
                   env=_env(home))
    path = Path(f"{trace}.diagnoses.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def checked(paths: Iterable[Path]) -> dict[str, dict]:
    """`faultlens check --json` over the traces once, as a user runs it: its result per trace name."""
    done = subprocess.run([*FAULTLENS, "check", "--json", *map(str, paths)], capture_output=True, text=True,
                          env={**os.environ, "FAULTLENS_LOG_LEVEL": "ERROR"})
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return {Path(r["trace"]).stem: r for r in map(json.loads, done.stdout.splitlines())}


def assert_expect_files_kept(written: Path, kept: Path, names: Iterable[str]) -> None:
    """The expect files under ``kept`` are exactly the ones the writer writes into ``written``."""
    files = sorted(p.name for p in kept.glob("*.expect.jsonl"))
    assert files == sorted(f"{name}.parquet.expect.jsonl" for name in names)
    for name in files:
        assert (written / name).read_text() == (kept / name).read_text(), name


def offline(trace: Path) -> list[dict]:
    done = subprocess.run([*FAULTLENS, "analyze", str(trace), "--no-progress"], check=True,
                          capture_output=True, text=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def through_broker(trace: Path, mode: str, work: Path, speed: float = 40.0) -> list[dict]:
    """`live`, `backlog`, `group` or `split`: the trace through a broker of its own, its diagnoses read back."""
    return _through_broker(trace, mode, work, speed, None)[0]


def _through_broker(trace: Path, mode: str, work: Path, speed: float,
                    meanwhile: Callable[[], T] | None) -> tuple[list[dict], T | None]:
    """through_broker, and what ``meanwhile()`` returned: called once the replay is in, while the
    members run to their stop (the time a broker run mostly waits)."""
    home = work / f"home-{mode}"
    home.mkdir(parents=True, exist_ok=True)
    idle_stop = GROUP_IDLE_STOP_S if mode in ("group", "backlog") else IDLE_STOP_S
    with _broker(home) as bootstrap:
        members = 3 if mode == "group" else 1
        if mode == "backlog":
            _replay(bootstrap, home, trace, 0)
        if mode == "split":
            procs = [_diagnose(bootstrap, home, f"outside-split-{stage}", work / f"split-{stage}-{i}.log",
                               idle_stop, stage) for stage in ("node", "job") for i in range(3)]
        else:
            procs = [_diagnose(bootstrap, home, f"outside-{mode}", work / f"{mode}-{i}.log", idle_stop)
                     for i in range(members)]
        if mode != "backlog":
            _replay(bootstrap, home, trace, speed)
        beside = meanwhile() if meanwhile is not None else None
        for p in procs:
            p.wait(timeout=1800)
        (work / mode).mkdir(exist_ok=True)
        return _recorded(bootstrap, home, work / mode), beside


def with_offline(trace: Path, mode: str, work: Path, speed: float = 40.0) -> tuple[list[dict], list[dict]]:
    """through_broker's diagnoses and `faultlens analyze`'s, analyze run while the members run to
    their stop (after the replay: it takes no CPU from members keeping pace with it)."""
    found, off = _through_broker(trace, mode, work, speed, lambda: offline(trace))
    assert off is not None
    return found, off


def compare(results: dict[str, list[dict]]) -> list[str]:
    """Every acting verdict that not all modes give, with the modes that give it."""
    sets = {mode: acting(ds) for mode, ds in results.items()}
    every = set().union(*sets.values()) if sets else set()
    lines = []
    for k in sorted(every):
        have = [m for m, s in sets.items() if k in s]
        if len(have) != len(sets):
            lines.append(f"{'/'.join(have)} only: {k[0]} {k[1]} {k[2]} {list(k[3])} {k[4]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--speed", type=float, default=40.0, help="live and group replay pace (K x real time)")
    parser.add_argument("--work", type=Path, help="where the brokers' homes, logs and results go")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="outside-modes-"))
    work.mkdir(parents=True, exist_ok=True)
    results = {}
    for mode in args.modes:
        results[mode] = offline(args.trace) if mode == "offline" else through_broker(args.trace, mode, work, args.speed)
        (work / f"{mode}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in results[mode]))
        print(json.dumps({"mode": mode, "diagnoses": len(results[mode]), "acting": sorted(acting(results[mode]))}))
    differences = compare(results)
    print("\n".join(differences) or "every mode gives the same verdicts")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
