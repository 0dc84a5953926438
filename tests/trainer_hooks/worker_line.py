"""One JSON line from a test worker to the stdout its ranks share.

print() writes the text and its newline in two writes when stdout is unbuffered (PYTHONUNBUFFERED,
as under a launcher), so two ranks starting together printed `{...}{...}` and then two newlines:
the test never saw either start. One os.write of the whole line is atomic on a pipe (under PIPE_BUF)."""

from __future__ import annotations

import json
import os
import sys


def say(obj: dict) -> None:
    sys.stdout.flush()  # whatever print() left in the buffer goes first, in order
    os.write(sys.stdout.fileno(), (json.dumps(obj) + "\n").encode())
