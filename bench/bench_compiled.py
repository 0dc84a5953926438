"""The hot path compiled by mypyc, measured against the same commit pure, outside the install (issue 56).

    .venv/bin/python -m bench.bench_compiled [--out /tmp/faultlens-compiled] [--skip-build]
        [--callgrind] [--duration 30] [--repeat 3]

1. ``git archive HEAD`` into OUT/pure and OUT/compiled; in OUT/compiled the ``PATCHES`` below are
   applied (each must match its text once) and mypyc compiles ``MODULES`` in place, as one group,
   with a minimal mypy config (pyproject's ``warn_unused_configs`` makes mypyc exit 1 on the
   project's overrides). The build's wall and CPU seconds are printed.
2. bench/bench_floor_pipeline.py, ``--stage node`` and ``--stage all``, in each tree (PYTHONPATH
   the tree): CPU µs a message (best of ``--repeat``) and the sha256 of the outputs, which must be
   equal; with ``--callgrind``, instructions a message (a run minus a setup-only run, as
   bench_floor_pipeline's docstring counts them).

Nothing here changes the repository or the install. bench_floor (through a broker) and
``bench.check_same_diagnoses`` run in a tree by hand: ``cd OUT/compiled && PYTHONPATH=$PWD
<repo>/.venv/bin/python -m bench.bench_floor ...``. Results: bench/results_throughput.md, helper D10.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The node stage's and the job stage's per-event modules (cProfile of `--stage all` on
# bench_floor's backlog), under faultlens/. Left out, and why (bench/results_throughput.md):
# events/step_reading.py, gpu_reading.py, beat_reading.py and typed_read.py define msgspec Structs,
# whose annotations a compiled module replaces with `type`: every typed read then fails validation
# and falls back to the general decode (same outputs, +47k instructions a message);
# events/gpu_table.py (a list subclass: refused); diagnosis/engine/detector.py (a
# runtime_checkable Protocol: compiled, fails at import).
MODULES = [
    "diagnosis/engine/core.py",
    "diagnosis/engine/stages.py",
    "diagnosis/engine/implicit.py",
    "diagnosis/engine/lane.py",
    "diagnosis/engine/dedup.py",
    "diagnosis/engine/debounce.py",
    "diagnosis/edge/consumer.py",
    "diagnosis/edge/node_consumer.py",
    "diagnosis/rules/training.py",
    "diagnosis/rules/liveness.py",
    "diagnosis/rules/thermal.py",
    "diagnosis/rules/loss_stalled.py",
    "diagnosis/rules/gpu_memory.py",
    "diagnosis/hang/detector.py",
    "diagnosis/peers/features.py",
    "diagnosis/peers/sample_features.py",
    "streams/intake.py",
    "streams/runner/event_time.py",
    "events/event_time.py",
    "events/event_clock.py",
]

# What the compiled modules need changed, found by their outputs: mypyc checks a value against
# the type mypy inferred for its variable, and reads a NamedTuple's fields by index.
PATCHES = [
    # The two product changes D10 first applied here (a variable of its own for the peeked
    # EnvelopeTime in streams/intake.py; iter_topics' messages typed as a Protocol both clients
    # fit, streams/messages.py) are in the source now.
    # Not the product: bench_floor times the first read by replacing the runner's intake.split,
    # and a compiled Intake's methods cannot be replaced on the object.
    (
        "bench/bench_throughput.py",
        "    runner.intake.split = read\n",
        "    class _Timed:\n"
        "        def __init__(self, intake):\n"
        "            self._intake, self.split = intake, read\n\n"
        "        def __getattr__(self, name):\n"
        "            return getattr(self._intake, name)\n\n"
        "    runner.intake = _Timed(runner.intake)\n",
    ),
]

_MYPY_CONFIG = "[mypy]\npython_version = 3.11\nignore_missing_imports = True\nfollow_imports = silent\n"


def export(tree: Path) -> None:
    """The committed HEAD, as a plain tree (the faultlens/ links kept)."""
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)


def patch(tree: Path) -> None:
    for rel, old, new in PATCHES:
        path = tree / rel
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{rel}: the text to patch is not there once (the module changed): {old[:60]!r}")
        path.write_text(text.replace(old, new))


def build(tree: Path) -> dict:
    """mypyc over MODULES in ``tree``, in place; the build's wall and CPU seconds."""
    config = tree / "mypyc.ini"
    config.write_text(_MYPY_CONFIG)
    mypyc = Path(sys.executable).with_name("mypyc")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(
        [str(mypyc), "--config-file", str(config), *(f"faultlens/{m}" for m in MODULES)], cwd=tree, capture_output=True, text=True
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"mypyc failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    built = [p for p in tree.rglob("*.so") if "build" not in p.relative_to(tree).parts]  # the links not followed
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "measure": "build",
        "commit": commit.stdout.strip(),
        "modules": len(MODULES),
        "extensions": len(built),
        "wall_s": round(wall, 1),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "load_average": os.getloadavg(),
    }


def _pipeline(tree: Path, stage: str, args: list[str], wrap: list[str] | None = None) -> tuple[dict, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    cmd = [*(wrap or []), sys.executable, "-m", "bench.bench_floor_pipeline", "--stage", stage, *args]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def instructions(tree: Path, stage: str, duration: int) -> float:
    """Callgrind's instructions a message of the loop: a run minus a setup-only run."""
    counts = []
    for extra in ([], ["--setup-only"]):
        with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
            wrap = ["setarch", "x86_64", "-R", "valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}"]
            row, err = _pipeline(tree, stage, ["--duration", str(duration), "--repeat", "1", *extra], wrap)
        found = re.search(r"Collected : (\d+)", err)
        if found is None:
            raise SystemExit(f"no callgrind count:\n{err[-2000:]}")
        counts.append(int(found.group(1)))
    return (counts[0] - counts[1]) / row["messages"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "faultlens-compiled")
    ap.add_argument("--skip-build", action="store_true", help="measure the trees already in OUT")
    ap.add_argument("--callgrind", action="store_true", help="also count instructions a message (slow)")
    ap.add_argument("--duration", type=int, default=30, help="seconds of bench_floor's backlog (32 nodes)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    pure, compiled = args.out / "pure", args.out / "compiled"
    if not args.skip_build:
        export(pure)
        export(compiled)
        patch(compiled)
        print(json.dumps(build(compiled)), flush=True)
    for stage in ("node", "all"):
        rows = {}
        for name, tree in (("pure", pure), ("compiled", compiled)):
            row, _ = _pipeline(tree, stage, ["--duration", str(args.duration), "--repeat", str(args.repeat)])
            if args.callgrind:
                row["instructions_per_message"] = round(instructions(tree, stage, args.duration))
            rows[name] = row
            print(json.dumps({"measure": f"pipeline --stage {stage}", "tree": name, **row}), flush=True)
        same = rows["pure"]["outputs_sha256"] == rows["compiled"]["outputs_sha256"]
        ratio = rows["compiled"]["us_per_message"] / rows["pure"]["us_per_message"]
        print(
            json.dumps({"measure": f"pipeline --stage {stage}", "same_outputs": same, "compiled_over_pure_cpu": round(ratio, 3)}),
            flush=True,
        )
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
