"""The diagnoses `faultlens analyze` gives, as one fingerprint: a change to how the engine reads
events (batches, columns) must leave every diagnosis the same, byte for byte (issue 56).

    .venv/bin/python -m bench.check_same_diagnoses [--traces DIR] [--out FILE]
    .venv/bin/python bench/check_same_diagnoses.py [--traces DIR] [--out FILE]   (the same)

Over a simulated trace (8 nodes x 8 GPUs, 1,200 s, seed 1) and every foreign trace
(tests/fixtures/foreign/), each diagnosis as `faultlens analyze` prints it (one JSON line, its
final version); the lines sorted, one sha256 per trace and one over all. Run it in two trees (a
git worktree of the commit before a change, and the change) and compare the last line; ``--out``
keeps the sorted lines to diff when they differ. ``--traces`` keeps the Parquet traces between
runs (the simulation takes a while): both trees then read the same files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import orjson

# Run as a script (`python bench/check_same_diagnoses.py`), Python puts bench/ on the path, not the
# repository root that `bench.testbed` is found under; `python -m bench.check_same_diagnoses` needs nothing.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.testbed import foreign  # noqa: E402
from faultlens.diagnosis.engine.offline import analyze_trace  # noqa: E402
from faultlens.engine_flags import add_engine_arguments, engine_config  # noqa: E402

SIMULATED = ("simulated", ["--nodes", "8", "--gpus", "8", "--duration", "1200", "--seed", "1"])


def traces(folder: Path) -> list[Path]:
    """The simulated trace and every foreign case as Parquet under ``folder`` (written if absent)."""
    paths = []
    sim = folder / f"{SIMULATED[0]}.parquet"
    if not sim.exists():
        subprocess.run([sys.executable, "-m", "faultlens.cli", "simulate", *SIMULATED[1], "--out", str(sim),
                        "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    paths.append(sim)
    for name in foreign.names():
        path = folder / f"{name}.parquet"
        if not path.exists():
            foreign.write_parquet(name, folder)
        paths.append(path)
    return paths


def diagnoses(path: Path) -> list[bytes]:
    """`faultlens analyze PATH`'s stdout lines (the default engine flags), sorted."""
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    found, _ = analyze_trace(path, config=engine_config(parser.parse_args([])))
    return sorted(orjson.dumps(d.to_dict()) for d in found)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", help="folder to keep the Parquet traces in (default: a temporary one)")
    ap.add_argument("--out", help="write every trace's sorted diagnoses here (to diff two trees)")
    args = ap.parse_args(argv)
    with TemporaryDirectory() as tmp:
        folder = Path(args.traces or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        whole = hashlib.sha256()
        lines: list[bytes] = []
        total, seconds = 0, 0.0
        paths = traces(folder)
        for path in paths:
            t = time.perf_counter()
            found = diagnoses(path)
            spent = time.perf_counter() - t
            seconds += spent
            digest = hashlib.sha256(b"\n".join(found)).hexdigest()
            whole.update(path.stem.encode() + b"\0" + digest.encode())
            total += len(found)
            lines += [path.stem.encode() + b" " + line for line in found]
            print(json.dumps({"trace": path.stem, "diagnoses": len(found), "sha256": digest[:12],
                              "analyze_s": round(spent, 2)}), flush=True)
        if args.out:
            Path(args.out).write_bytes(b"\n".join(lines) + b"\n")
        print(json.dumps({"traces": len(paths), "diagnoses": total,
                          "sha256": whole.hexdigest()[:12], "analyze_s": round(seconds, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
