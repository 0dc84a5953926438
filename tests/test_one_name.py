"""One name per module (issue 57): each folder linked into the package is importable only as
`faultlens.NAME`. From the repository root its bare name would load a second copy of every module
(two FaultClass enums; an `except` on one copy's InvalidEvent missing the other's), so the folder's
__init__ refuses it, and no file of the repository uses a bare name: not in an import, not in a
`python -m` line of a script, a help text or a document."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.layout import ROOT, imports_of, linked_folders

# Text that names a module to run or import: code blocks in documents, shell scripts, notebooks.
TEXT_SUFFIXES = {".md", ".sh", ".toml", ".ipynb", ".yaml", ".yml", ".cfg", ".ini", ".txt.in"}
# Recorded captures (py-spy dumps, agent output) keep the command line the process had when recorded.
RECORDED_SUFFIXES = {".txt", ".jsonl", ".log"}
SKIP_DIRS = {"__pycache__", "build", "dist", "node_modules"}


def _files() -> Iterator[Path]:
    """Every file of the checkout once: os.walk does not follow the links into faultlens/."""
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in names:
            yield Path(top) / name


def _bare(module: str, folders: tuple[str, ...]) -> bool:
    return module.split(".")[0] in folders


def bare_uses(path: Path, text: str, folders: tuple[str, ...]) -> list[str]:
    """`path:line: what` for each bare-name use in one file's text."""
    group = "|".join(folders)
    run = re.compile(rf"-m\s+({group})\.\w")
    found = [f"{line}: python -m {m.group(1)}..." for line, row in enumerate(text.splitlines(), 1) for m in run.finditer(row)]
    if path.suffix == ".py":
        found += [f"{line}: import {module}" for line, module in imports_of(ast.parse(text, str(path))) if _bare(module, folders)]
    else:
        statement = re.compile(rf"^\W*(?:from|import)\s+({group})(?:\.|\s|$)")
        found += [f"{line}: import {m.group(1)}..." for line, row in enumerate(text.splitlines(), 1)
                  if (m := statement.match(row))]
    return [f"{path.relative_to(ROOT)}:{where}" for where in found]


def test_the_links_are_the_nine_folders():
    # The one list (tests/layout.py reads it from the links); a folder dropped by mistake would
    # shrink every check below, so its floor is pinned here.
    folders = linked_folders()
    assert {"events", "streams", "parsing", "collectors", "diagnosis", "remediation", "trainer_hooks", "history",
            "simulator"} <= set(folders)
    for name in folders:
        assert os.readlink(ROOT / "faultlens" / name) == f"../{name}"


def test_a_bare_import_fails_naming_the_faultlens_name():
    folders = linked_folders()
    probe = ("import importlib, json, sys\n"
             "out = {}\n"
             "for name in sys.argv[1:]:\n"
             "    try:\n"
             "        importlib.import_module(name)\n"
             "        out[name] = None\n"
             "    except ImportError as exc:\n"
             "        out[name] = str(exc)\n"
             "print(json.dumps(out))\n")
    # cwd is the repository root, where every folder is on sys.path by its bare name.
    res = subprocess.run([sys.executable, "-c", probe, *folders, *(f"faultlens.{n}" for n in folders)], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    for name in folders:
        assert out[f"faultlens.{name}"] is None
        assert out[name] is not None and f"faultlens.{name}" in out[name], (name, out[name])


def test_a_bare_submodule_import_fails_before_any_module_loads():
    # The usual mistake: a submodule by its bare name. The package's __init__ refuses it first, so
    # no second copy of the submodule is ever created.
    probe = ("import sys\n"
             "try:\n"
             "    import events.diagnosis_record\n"
             "except ImportError as exc:\n"
             "    print(exc)\n"
             "print(sorted(m for m in sys.modules if m.startswith('events')))\n")
    res = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    message, loaded = res.stdout.strip().splitlines()
    assert "faultlens.events" in message
    assert loaded == "[]"


def test_no_file_uses_a_bare_name():
    folders = linked_folders()
    offending: list[str] = []
    seen = 0
    for path in _files():
        if path.suffix == ".py" or path.suffix in TEXT_SUFFIXES:
            seen += 1
            offending += bare_uses(path, path.read_text(errors="replace"), folders)
    assert seen > 500, seen  # the walk found the repository (a moved root would pass vacuously)
    assert offending == [], "use the faultlens. name (docs/CONTRIBUTING.md, Layout):\n" + "\n".join(offending)


def test_the_check_sees_every_form_of_a_bare_name(tmp_path):
    folders = ("events", "streams")
    ev, st = folders
    code = (f"import {ev}.envelope\nfrom {st}.config import KafkaSettings\ndef f():\n    from {ev} import topics\n"
            f"HELP = 'python -m {st}.replay FILE'\nimport faultlens.{ev}.envelope\nimport eventsource\n")
    found = bare_uses(ROOT / "x.py", code, folders)
    assert [f.split(":", 1)[1] for f in found] == [f"5: python -m {st}...", f"1: import {ev}.envelope",
                                                     f"2: import {st}.config", f"4: import {ev}"]
    script = f"exec $PY -m {ev}.replay --x\nexec $PY -m faultlens.{ev}.replay\n```\nfrom {st}.config import X\n```\n"
    assert [f.split(":", 1)[1] for f in bare_uses(ROOT / "x.sh", script, folders)] == [f"1: python -m {ev}...",
                                                                                     f"4: import {st}..."]
