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

How a run ends. Live, the members stop at an idle stop of three graces: the wall clock then moves
every quiet job's time two graces past its last event (a stream that ended is judged as live
alone judges it), which is what the live mode checks of silence. A backlog or a group judges no
silence (below): their members are stopped (SIGTERM, a clean stop that hands on and flushes what
they hold, as an idle stop does) once their group committed the telemetry topics to the end
offsets the replay left (tests/diagnosis/live_members.py), not after an idle time; the idle stop
stays on as the backstop.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from faultlens.events.topics import TELEMETRY_TOPICS
from faultlens.streams.config import KafkaSettings
from tests.diagnosis.live_members import committed_to_end
from tests.in_process import faultlens_main
from tests.progress import cpu_ticks, files_size

FAULTLENS = [sys.executable, "-m", "faultlens"]
MODES = ("offline", "live", "backlog", "group", "split")
GRACE_S = 30.0  # the engine's default (--grace): live, the idle stop is three of them
# The group's check is that one of three members reads it all and the others stand by (silence is
# not compared there, the live mode's idle stop is what judges the wall clock past a stream's end):
# the active member is stopped once its group committed the telemetry to the end, handing on what
# it holds as at any stop. A standby without the lease exits after this idle stop, standing by
# through the replay's first 20 s (switch_wave at 40x: 15 s of events), not to the end. For the
# active member (and the backlog's, whose replay is all in before it starts) it is the backstop.
GROUP_IDLE_STOP_S = 20

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


def _diagnose(bootstrap: str, home: Path, group: str, log: Path, idle_stop: float, grace: float,
              stage: str = "all") -> subprocess.Popen:
    return subprocess.Popen([*FAULTLENS, "diagnose", "--bootstrap", bootstrap, "--group", group, "--stage", stage,
                             "--idle-stop", str(idle_stop), "--grace", str(grace)], stdout=subprocess.DEVNULL,
                            stderr=log.open("w"), env=_env(home))


def stop_once_read(settings: KafkaSettings, group: str, procs: list[subprocess.Popen],
                   progress: Callable[[], object]) -> None:
    """The `faultlens diagnose` members of ``group`` (stage all) stopped once the group committed
    every telemetry partition to its end offset now (all of it is in). Standbys still there are
    stopped with the active member: one handed the lease as it stops ends at once, its runner
    stopped before it reads (faultlens/commands/diagnose.py). Fails only when neither the
    commits nor ``progress()`` moved for 90 s (committed_to_end)."""
    committed_to_end(settings, group, TELEMETRY_TOPICS, running=lambda: any(p.poll() is None for p in procs),
                     progress=progress, what=group)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)


def _replay(bootstrap: str, trace: Path, speed: float) -> None:
    """`faultlens replay` by main() in this process (tests/in_process.py), as `checked` runs check: the
    members read what it wrote, not where it ran; an interpreter and its imports saved (~1 CPU-s)."""
    done = faultlens_main("replay", trace, "--bootstrap", bootstrap, "--speed", speed, "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]


def _recorded(bootstrap: str, out: Path) -> list[dict]:
    trace = out / "diagnoses.parquet"
    # The members are gone, so `diagnoses` is whole: the reader waits for the end offsets it
    # read at its start (streams/reader.py), then for 1 s of nothing, not 5. By main() in this
    # process, as _replay.
    done = faultlens_main("record", "--bootstrap", bootstrap, "--topics", "diagnoses", "--out", trace,
                          "--idle", "1", "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    path = Path(f"{trace}.diagnoses.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def checked(paths: Iterable[Path]) -> dict[str, dict]:
    """`faultlens check --json` over the traces once, its command line run by main() in this process
    (tests/in_process.py: an interpreter and the imports saved, what it prints the same): its result
    per trace name."""
    done = faultlens_main("check", "--json", *paths)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return {Path(r["trace"]).stem: r for r in map(json.loads, done.stdout.splitlines())}


def checked_and_found(paths: Iterable[Path]) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """`checked`, and the diagnoses its engine run gave each trace, as `faultlens analyze` prints them
    (the same engine, the default flags `offline` passes): a test of one trace's diagnoses reads them
    here instead of running the engine over that trace a second time."""
    import orjson

    from faultlens import replay_check

    found: dict[str, list[dict]] = {}
    engine = replay_check.analyze_trace

    def kept(trace, **kwargs):
        diagnoses, ran = engine(trace, **kwargs)
        found[Path(trace).stem] = [json.loads(orjson.dumps(d.to_dict())) for d in diagnoses]
        return diagnoses, ran

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replay_check, "analyze_trace", kept)
        results = checked(paths)
    assert sorted(found) == sorted(results), "check ran no engine of its own: the spy above lost it"
    return results, found


def assert_expect_files_kept(written: Path, kept: Path, names: Iterable[str]) -> None:
    """The expect files under ``kept`` are exactly the ones the writer writes into ``written``."""
    files = sorted(p.name for p in kept.glob("*.expect.jsonl"))
    assert files == sorted(f"{name}.parquet.expect.jsonl" for name in names)
    for name in files:
        assert (written / name).read_text() == (kept / name).read_text(), name


def written_and_checked(write: Callable[[Path], object], names: Iterable[str], folder: str):
    """A test module's three fixtures, module-scoped: ``traces``, the folder ``write`` wrote its
    traces and their expect files into (once); ``checked``, `faultlens check --json` over ``names``
    there (once); and ``found``, the diagnoses check's engine gave each trace (checked_and_found),
    which a test of one trace's diagnoses reads instead of running the engine over it again. Bind
    all three in the module: ``traces, checked, found = written_and_checked(...)``."""
    names = list(names)

    @pytest.fixture(scope="module", name="traces")
    def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
        out = tmp_path_factory.mktemp(folder)
        write(out)
        return out

    @pytest.fixture(scope="module", name="checked_and_found")
    def checked_and_found_traces(traces: Path) -> tuple[dict[str, dict], dict[str, list[dict]]]:
        return checked_and_found(traces / f"{name}.parquet" for name in names)

    @pytest.fixture(scope="module", name="checked")
    def checked_traces(checked_and_found: tuple[dict[str, dict], dict[str, list[dict]]]) -> dict[str, dict]:
        return checked_and_found[0]

    @pytest.fixture(scope="module", name="found")
    def found_traces(checked_and_found: tuple[dict[str, dict], dict[str, list[dict]]]) -> dict[str, list[dict]]:
        return checked_and_found[1]

    return traces, checked_and_found_traces, checked_traces, found_traces


def assert_every_trace_expected(results: dict[str, dict], names: Iterable[str], known: Iterable[str] = ()) -> None:
    """`checked`'s results: one a trace of ``names``, each what a person expects (but those a
    known failure is about), and no healthy machine evicted in any."""
    assert sorted(results) == sorted(names)
    for name, r in results.items():
        if name not in known:
            assert r["ok"], (name, r["missing"], r["extra"], r["changed"], r["healthy_evicted"])
        assert r["healthy_evicted"] == [], name


def offline(trace: Path, grace: float = GRACE_S) -> list[dict]:
    return analyzed(trace, grace)[0]


def analyzed(trace: Path, grace: float = GRACE_S) -> tuple[list[dict], dict]:
    """`faultlens analyze TRACE` (in this process, as `checked`): its diagnoses (stdout) and its summary
    (the last line on stderr)."""
    done = faultlens_main("analyze", trace, "--no-progress", "--grace", grace)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stderr.strip().splitlines()[-1])["summary"]
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()], summary


def through_broker(trace: Path, mode: str, work: Path, speed: float = 40.0, grace: float = GRACE_S) -> list[dict]:
    """`live`, `backlog`, `group` or `split`: the trace through a broker of its own, its diagnoses read back."""
    return _through_broker(trace, mode, work, speed, grace, None)[0]


def _through_broker(trace: Path, mode: str, work: Path, speed: float, grace: float,
                    meanwhile: Callable[[], T] | None) -> tuple[list[dict], T | None]:
    """through_broker, and what ``meanwhile()`` returned: called once the replay is in, while the
    members run to their stop (the time a broker run mostly waits)."""
    home = work / f"home-{mode}"
    home.mkdir(parents=True, exist_ok=True)
    read_stop = mode in ("group", "backlog")  # stopped once read (the module's doc), the idle stop a backstop
    idle_stop = GROUP_IDLE_STOP_S if read_stop else 3 * grace
    with _broker(home) as bootstrap:
        members = 3 if mode == "group" else 1
        if mode == "backlog":
            _replay(bootstrap, trace, 0)
        if mode == "split":
            stages = [(stage, work / f"split-{stage}-{i}.log") for stage in ("node", "job") for i in range(3)]
        else:
            stages = [("all", work / f"{mode}-{i}.log") for i in range(members)]
        logs = [log for _, log in stages]
        procs = [_diagnose(bootstrap, home, f"outside-split-{stage}" if mode == "split" else f"outside-{mode}",
                           log, idle_stop, grace, stage) for stage, log in stages]
        if mode != "backlog":
            _replay(bootstrap, trace, speed)
        beside = meanwhile() if meanwhile is not None else None
        if read_stop:
            stop_once_read(KafkaSettings(bootstrap=bootstrap), f"outside-{mode}", procs,
                           lambda: (files_size(*logs), tuple(cpu_ticks(p.pid) for p in procs)))
        for p in procs:
            p.wait(timeout=1800)
        (work / mode).mkdir(exist_ok=True)
        return _recorded(bootstrap, work / mode), beside


def with_offline(trace: Path, mode: str, work: Path, speed: float = 40.0,
                 grace: float = GRACE_S) -> tuple[list[dict], list[dict]]:
    """through_broker's diagnoses and `faultlens analyze`'s (the same --grace), analyze run while the
    members run to their stop (after the replay: it takes no CPU from members keeping pace with it)."""
    found, off, _ = with_offline_beside(trace, mode, work, lambda: None, speed, grace)
    return found, off


def with_offline_beside(trace: Path, mode: str, work: Path, beside: Callable[[], T], speed: float = 40.0,
                        grace: float = GRACE_S) -> tuple[list[dict], list[dict], T]:
    """with_offline, and what ``beside()`` returned: called after analyze, while the members still
    run to their stop. Live, that stop is three graces of waiting after the replay: a run of
    another broker's fits in it and adds no wall time."""
    found, got = _through_broker(trace, mode, work, speed, grace, lambda: (offline(trace, grace), beside()))
    assert got is not None
    return found, got[0], got[1]


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
    parser.add_argument("--grace", type=float, default=GRACE_S,
                        help="the engine's --grace, every mode alike (live: the idle stop is three of them)")
    parser.add_argument("--work", type=Path, help="where the brokers' homes, logs and results go")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="outside-modes-"))
    work.mkdir(parents=True, exist_ok=True)
    results = {}
    for mode in args.modes:
        results[mode] = (offline(args.trace, args.grace) if mode == "offline"
                         else through_broker(args.trace, mode, work, args.speed, args.grace))
        (work / f"{mode}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in results[mode]))
        print(json.dumps({"mode": mode, "diagnoses": len(results[mode]), "acting": sorted(acting(results[mode]))}))
    differences = compare(results)
    print("\n".join(differences) or "every mode gives the same verdicts")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
