"""`faultlens --help` and a light subcommand's `--help` import no heavy library (pandas, sklearn,
torch): the parser imports every command module, so one module-level import of those costs every
invocation. Run in a fresh interpreter, where nothing was imported before."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "heavy": []}
    assert "usage: faultlens" in proc.stdout  # the help was printed, not skipped
