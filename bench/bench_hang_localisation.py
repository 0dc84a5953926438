"""Hang localisation on the real captures: exact / group / wrong / none per reader (issue 38).

Every case folder under tests/fixtures/stacks/ (and its recorder/ subfolder) with a culprit in its
case.json is read by the stack reading alone (``read_hang_stacks``, what `faultlens stacks` ran
before recorder dumps) and, where the case has ``<rank>.fr.json``, by the recorder reading
(``diagnosis.hang.recorder.read_hang``). A verdict is *exact* when it names the culprit's machine
alone, *group* when the machines it names include the culprit's and others, *wrong* when they
miss it, *none* when it names no machine (an alert or no suspect). A case whose culprit is a
divergent branch (case.json ``bad_machine: false``) has no machine to find: naming none is *exact*
there, naming any is *wrong*. Prints one JSON line per case and reader, then one total per reader.

    .venv/bin/python -m bench.bench_hang_localisation [--stacks-only] [--tool faulthandler]

``--stacks-only`` imports nothing but ``read_hang_stacks``, so the same script measures an older
checkout (PYTHONPATH=that checkout).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from functools import partial
from pathlib import Path

from faultlens.diagnosis.hang.stack_reading import read_hang_stacks
from faultlens.events.topology import Topology

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "stacks"


def cases() -> list[Path]:
    found = [p.parent for p in FIXTURES.glob("*/case.json")] + [p.parent for p in FIXTURES.glob("*/*/case.json")]
    return sorted(p for p in found if "culprit_rank" in json.loads((p / "case.json").read_text()))


def grade(nodes: tuple[str, ...], culprit_node: str | None) -> str:
    if culprit_node is None:  # nothing to evict
        return "wrong" if nodes else "exact"
    if not nodes:
        return "none"
    if culprit_node not in nodes:
        return "wrong"
    return "exact" if len(nodes) == 1 else "group"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--stacks-only", action="store_true")
    ap.add_argument("--tool", choices=("py-spy", "faulthandler"), default="py-spy",
                    help="faulthandler: read the cases' faulthandler/ dumps (the trainer hook's), where they have them")
    args = ap.parse_args()
    totals: dict[str, Counter] = {}
    for folder in cases():
        case = json.loads((folder / "case.json").read_text())
        topology = Topology.from_data(json.loads((folder / "topology.json").read_text()))
        culprit_node = topology.by_rank[case["culprit_rank"]].node if case.get("bad_machine", True) else None
        src = folder / "faulthandler" if args.tool == "faulthandler" else folder
        if not src.is_dir():
            continue
        stacks = {int(p.stem): p.read_text() for p in src.glob("*.txt")}
        readers = {"stacks": partial(read_hang_stacks, stacks, topology)}
        recorders = {int(p.name.split(".")[0]): p.read_bytes() for p in folder.glob("*.fr.json")}
        if recorders and not args.stacks_only:
            from faultlens.diagnosis.hang.recorder import read_hang

            readers["recorder+stacks"] = partial(read_hang, stacks, recorders, topology)
        for name, read in readers.items():
            verdict = read()
            g = grade(tuple(verdict.nodes), culprit_node)
            totals.setdefault(name, Counter())[g] += 1
            print(json.dumps({"case": str(folder.relative_to(FIXTURES)), "reader": name, "grade": g,
                              "nodes": list(verdict.nodes), "culprit_node": culprit_node, "rule": verdict.rule}))
    for name, counts in totals.items():
        print(json.dumps({"reader": name, "cases": sum(counts.values()),
                          **{k: counts.get(k, 0) for k in ("exact", "group", "wrong", "none")}}))


if __name__ == "__main__":
    main()
