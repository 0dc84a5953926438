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
    line = json.dumps(obj) + "\n"
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stream with no file under it (a caller's, a test's): no one shares it
        sys.stdout.write(line)
        sys.stdout.flush()
        return
    sys.stdout.flush()
    os.write(fd, line.encode())
