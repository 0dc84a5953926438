"""`faultlens ARGV` run by its main() in the test's own process: the exit status `python -m
faultlens` exits with (faultlens/__main__.py raises SystemExit(main())), its stdout and stderr.

For a command that ends by itself and whose test is about what it prints and returns: a process
each cost an interpreter and the command's imports anew (`faultlens check` on a small trace ~2.5
CPU-s, the check itself ~0.6; a command with no broker ~0.6 CPU-s to print one line), several
seconds each on a loaded 2-core machine. A file that tests the command line itself still runs
it once as a user does (tests/progress.py's run_watched)."""

from __future__ import annotations

import io
import logging
import subprocess
from contextlib import redirect_stderr, redirect_stdout


def faultlens_main(*argv: object) -> subprocess.CompletedProcess:
    from faultlens.cli import main

    args = [str(a) for a in argv]
    # stdout with a .buffer, as a process's has: `analyze` writes its diagnoses' bytes there
    raw, err = io.BytesIO(), io.StringIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    kafka_log = logging.getLogger("kafka")
    level = kafka_log.level
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(args)
    finally:
        kafka_log.setLevel(level)  # main's logging setup quiets kafka-python; the tests after it keep theirs
    out.flush()
    return subprocess.CompletedProcess(["faultlens", *args], code, raw.getvalue().decode(), err.getvalue())
