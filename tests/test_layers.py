"""The layers of docs/CONTRIBUTING.md hold: import-linter's contracts (pyproject.toml) are kept,
they catch a wrong arrow, and no module of ours takes part in an import cycle."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import grimp
import pytest

from tests.layout import ROOT, linked_folders

PACKAGES = ("faultlens",)


def _lint_imports() -> str:
    exe = Path(sys.executable).with_name("lint-imports")
    found = str(exe) if exe.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports is missing: the test extra installs import-linter")
    return found


def test_contracts_are_kept():
    res = subprocess.run([_lint_imports(), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_every_linked_folder_has_its_layer():
    # A new top-level folder (its link in faultlens/ is the one list of them) is under the layers
    # contract only once it is named in a layer: an unnamed one could import anything.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    named = {name.strip() for layer in layers for name in re.split(r"[|:]", layer)}
    assert set(linked_folders()) - named == set()


def test_a_wrong_arrow_breaks_the_contract(tmp_path):
    # The same contract over two tiny packages, one of which imports upward: it must be reported.
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "__init__.py").write_text("")
    (tmp_path / "streams" / "events.py").write_text("from diagnosis import engine\n")
    (tmp_path / "diagnosis").mkdir()
    (tmp_path / "diagnosis" / "__init__.py").write_text("")
    (tmp_path / "diagnosis" / "engine.py").write_text("from streams import events\n")
    (tmp_path / ".importlinter").write_text(textwrap.dedent("""\
        [importlinter]
        root_packages =
            streams
            diagnosis

        [importlinter:contract:layers]
        name = layers only downward
        type = layers
        layers =
            diagnosis
            streams
        """))
    res = subprocess.run([_lint_imports(), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert res.returncode != 0
    assert "streams.events -> diagnosis.engine" in res.stdout


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    group.append(m)
                    if m == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_cycles():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    # A package's __init__ re-exporting its modules is not a cycle worth reporting.
    modules = {m for m in graph.modules if not any(m == p for p in PACKAGES)}
    modules = {m for m in modules if not graph.find_children(m)}
    assert _cycles(graph, modules) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc import b\n")
    (pkg / "b.py").write_text("from cyc import a\n")
    (pkg / "c.py").write_text("from cyc import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyc", cache_dir=None)
    assert _cycles(graph, {"cyc.a", "cyc.b", "cyc.c"}) == [["cyc.a", "cyc.b"]]
