"""bench/check_same_diagnoses.py runs as a script too, from any folder: `python -m
bench.check_same_diagnoses` found `bench.testbed` from the repository root, the script form did not."""

from __future__ import annotations

import subprocess
import sys

from tests.layout import ROOT


def test_the_script_form_starts_from_another_folder(tmp_path):
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "check_same_diagnoses.py"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "--traces" in res.stdout
