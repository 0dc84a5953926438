"""Backtest realignment (parsing.realign) on the lines no reading took, pair by pair, on each pair's own code.

    python -m tools.realign_backtest POOL ... [--validate-from N] [--show]

Each POOL is what ``tools.log_corpus_score --misses`` printed for an opened pair of fresh batches
(``unread_fresh<N>_<M>_<commit8>.txt``) on the code just before the round that opened the pair:
its rows with ``got == []`` are the fault lines nothing read (tools.grammar_backtest.pool_rows reads
them). Today's parsers read most of those lines, so the pair is scored on its own commit: a git
worktree of it, where a worker process reads each row with that commit's parsers and, for a line
that gave nothing, again from each of today's parsing.realign.candidates (loaded from this tree),
the cut-off prefix's level carried as the parsers of today carry it (the kernel: dmesg -x's columns;
the trainer: a level of notice or below makes the events record-only). Caught right: an acting
event of the row's class; wrong: acting events of other classes only. The pair's healthy rows
that gave no acting event on its commit are read the same way: newly fired when realignment makes
one act. Pairs from N on (``--validate-from``) are the validation half, the rest the design half.

Firing over every open healthy row and the whole logs is measured at HEAD with the shipped
parsers, before and after: ``tools.log_corpus_score --misses`` and ``tools.whole_log_score --misses``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_POOL = re.compile(r"fresh(\d+)_(\d+)_([0-9a-f]{8})")
_SOCKET_WORDS = frozenset(
    {"connection reset by peer", "connection closed by peer", "connection closed by remote peer", "broken pipe"}
)
_RANK_LABEL = re.compile(r"^(?:\d{1,6}: )?(?:\[(?:rank|default)\d+\]:\s?)?")


# -- the worker: runs in a worktree of the pair's commit, its parsers imported from there ---------------
def _head_realign() -> Any:
    """Today's parsing.realign, with today's timestamps patterns, beside the old commit's parsers."""

    def load(name: str, path: Path) -> Any:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module

    head_ts = load("realign_head_timestamps", ROOT / "parsing" / "timestamps.py")
    old_ts = sys.modules.get("faultlens.parsing.timestamps")
    sys.modules["faultlens.parsing.timestamps"] = head_ts
    try:
        realign = load("realign_head", ROOT / "parsing" / "realign.py")
    finally:
        if old_ts is not None:
            sys.modules["faultlens.parsing.timestamps"] = old_ts
    return realign, head_ts


def _acting(events: list[Any]) -> list[Any]:
    return [e for e in events if e.data.get("action") not in (None, "none")]


def _read(rows: list[dict[str, Any]], realign: Any, head_ts: Any) -> list[dict[str, Any]]:
    from faultlens.parsing.kernel_quiet import record_only
    from faultlens.parsing.registry import parser_for

    out = []
    for row in rows:
        source = row.get("source", "kernel")
        lines = row["lines"] if "lines" in row else [row["line"]]
        first, second, forms = [], [], []
        parser = parser_for(source)
        again = parser_for(source)
        for line in lines:
            got = parser.feed(line)
            first.extend(got)
            got2 = again.feed(line)
            if not got2:
                body = _RANK_LABEL.sub("", line, count=1) if source != "kernel" else line
                msg = head_ts.split_timestamp(body).message
                for cand in realign.candidates(body, msg, programs=source != "kernel"):
                    if source == "kernel":
                        got2 = again.feed(realign.dmesg_level_prefix(cand.level) + cand.line)
                    else:
                        got2 = again.feed(line[: len(line) - len(body)] + cand.line)  # behind its rank prefix
                        if (
                            got2
                            and cand.level == 4
                            and any(e.data.get("basis") == "model" or e.data.get("error") in _SOCKET_WORDS for e in got2)
                        ):
                            got2 = []  # TrainerLogParser._realigned: at warning a guess or socket words do not act
                        if got2 and cand.level is not None and cand.level >= 5:
                            told = [(e.kind, e.data) for e in got2 if e.kind != "nan"]
                            record_only(told, "the prefix's level")
                    if got2:
                        forms.append(cand.form)
                        break
            second.extend(got2)
        first.extend(parser.flush())
        second.extend(again.flush())
        out.append({"before": sorted({str(e.data.get("fault")) for e in _acting(first)}),
                    "after": sorted({str(e.data.get("fault")) for e in _acting(second)}),
                    "after_any": sorted({str(e.data.get("fault")) for e in second}), "forms": forms})  # fmt: skip
    return out


def worker(job: Path) -> int:
    realign, head_ts = _head_realign()
    task = json.loads(job.read_text(encoding="utf-8"))
    print(json.dumps({"unread": _read(task["unread"], realign, head_ts), "healthy": _read(task["healthy"], realign, head_ts)}))
    return 0


# -- the driver: at HEAD ------------------------------------------------------------------------------
def _worktree(commit8: str) -> tuple[Path, bool]:
    """A worktree of the commit (one left by an earlier run is used as it is), and whether it was made here."""
    path = Path(tempfile.gettempdir()) / f"realign_bt_{commit8}"
    if path.exists():
        return path, False
    full = subprocess.run(["git", "rev-parse", commit8], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["git", "worktree", "add", "--detach", str(path), full], cwd=ROOT, capture_output=True, check=True)
    return path, True


def backtest_pool(pool: Path, show: bool) -> dict[str, Any]:
    from tools.grammar_backtest import _lines, pool_rows

    a, b, commit8 = _POOL.search(pool.name).groups()  # type: ignore[union-attr]
    unread, faults = pool_rows(pool)
    corpus = ROOT / "tests" / "fixtures" / "log_corpus"
    healthy = [row for n in (a, b) for p in sorted((corpus / f"fresh{n}").glob("*.jsonl"))
               for t in p.read_text(encoding="utf-8").splitlines() if t.strip() and (row := json.loads(t)).get("healthy")]  # fmt: skip
    tree, made = _worktree(commit8)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"unread": unread, "healthy": healthy}, f)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    try:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", f.name], cwd=tree, env=env,
                              capture_output=True, text=True, check=True)  # fmt: skip
    finally:
        os.unlink(f.name)
        if made:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    right = wrong = recorded = 0
    for row, r in zip(unread, got["unread"], strict=True):
        if r["before"] or not r["forms"]:
            continue  # read on its commit after all (a cut row found again), or no realignment took it
        ok = row.get("fault") in r["after"]
        right += ok
        wrong += bool(r["after"]) and not ok
        recorded += not r["after"]
        if show:
            print(json.dumps({"pool": pool.name[:24], "right": ok, "want": row.get("fault"), "got": r["after_any"],
                              "acting": bool(r["after"]), "forms": r["forms"], "line": _lines(row)[0][:160]}))  # fmt: skip
    quiet = fired = 0
    for row, r in zip(healthy, got["healthy"], strict=True):
        if r["before"]:
            continue
        quiet += 1
        fired += bool(r["after"])
        if show and r["forms"]:
            print(json.dumps({"pool": pool.name[:24], "healthy": True, "fired": bool(r["after"]), "got": r["after_any"],
                              "forms": r["forms"], "line": _lines(row)[0][:160]}))  # fmt: skip
    return {"pair": pool.name, "faults": faults, "unread": len(unread), "caught_right": right, "caught_wrong": wrong,
            "recorded": recorded, "quiet_healthy": quiet, "newly_fired": fired}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pools", nargs="*", type=Path)
    ap.add_argument("--validate-from", type=int, default=47, help="first batch of the validation half")
    ap.add_argument("--show", action="store_true", help="print each realigned row")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        return worker(args.worker)
    from tools.grammar_backtest import print_by_half  # (here: a worker imports its own commit's faultlens)

    print_by_half(args.pools, args.validate_from, lambda pool: backtest_pool(pool, args.show),
                  ("faults", "unread", "caught_right", "caught_wrong", "recorded", "quiet_healthy", "newly_fired"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
