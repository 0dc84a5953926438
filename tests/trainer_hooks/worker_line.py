"""One JSON line from a test worker to the stdout its ranks share.

print() writes the text and its newline in two writes when stdout is unbuffered (PYTHONUNBUFFERED,
as under a launcher), so two ranks starting together printed `{...}{...}` and then two newlines:
the test never saw either start. One os.write of the whole line is atomic on a pipe (under PIPE_BUF)."""

from __future__ import annotations

from faultlens.commands.json_line import say_json as say

__all__ = ["say"]
