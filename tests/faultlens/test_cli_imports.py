"""`faultlens --help` and a light subcommand's `--help` import no heavy library (pandas, sklearn,
torch): the parser imports every command module, so one module-level import of those costs every
invocation. Run in a fresh interpreter, where nothing was imported before."""

from __future__ import annotations

import json
import sys

import pytest

from tests.progress import run_watched

HEAVY = ("pandas", "sklearn", "torch")

_PROBE = """
import json, sys
from faultlens.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "heavy": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)


@pytest.mark.parametrize("argv", [["--help"], ["replay", "--help"], ["record", "--help"], ["keys", "--help"],
                                  ["report", "--help"], ["parse", "--help"]])
def test_help_imports_no_heavy_library(argv):
    # Waited for while the interpreter computes (starting, importing), not 120 s (issue 47).
    proc = run_watched([sys.executable, "-c", _PROBE, *argv], stall_s=60, cpu=True, limit_s=280)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "heavy": []}
    assert "usage: faultlens" in proc.stdout  # the help was printed, not skipped


# What made every invocation take ~1 s: the engine, Kafka clients, Parquet and DuckDB.
STARTUP_HEAVY = ("pyarrow", "kafka", "duckdb", "faultlens.diagnosis.engine.core", "numpy")


def test_help_lists_each_command_with_its_own_help_without_importing_it():
    import importlib

    from faultlens.cli import _help_of
    from faultlens.commands import COMMAND_NAMES

    for name in COMMAND_NAMES:
        assert _help_of(name) == importlib.import_module(f"faultlens.commands.{name}").HELP, name


@pytest.mark.parametrize("argv", [["--help"], ["parse", "{log}"], ["stacks", "--help"], ["-v", "parse", "--help"]])
def test_light_commands_import_only_themselves(argv, tmp_path):
    log = tmp_path / "one.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    probe = _PROBE.replace(repr(HEAVY), repr(STARTUP_HEAVY))
    argv = [a.format(log=log) for a in argv]
    proc = run_watched([sys.executable, "-c", probe, *argv], stall_s=60, cpu=True, limit_s=280)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "heavy": []}, proc.stderr[-2000:]
    if argv[0] == "parse":
        assert '"kind":"gpu_lost"' in proc.stdout
