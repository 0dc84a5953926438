"""One JSON line on stdout in one write, for processes that share it.

`faultlens diagnose --workers N` starts members that write their last line to the stdout of the
launch. print() hands the text and its newline to the stream separately, and where stdout is
unbuffered (PYTHONUNBUFFERED, a launcher's setting) that is two writes: two members ending
together printed `{...}{...}` and then two newlines (a fresh-clone CI saw it). One os.write of the
whole line is atomic on a pipe under PIPE_BUF (4 KiB on Linux; a summary is ~600 bytes)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def say_json(obj: dict[str, Any]) -> None:
    """Write ``obj`` as one line, after whatever the stream still buffers."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (json.dumps(obj) + "\n").encode())
