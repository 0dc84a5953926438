"""`diagnose --workers` members share the launch's stdout: each summary must be one write."""

from __future__ import annotations

import io
import json
import os
import sys

from faultlens.commands.json_line import say_json


def _unbuffered_stdout(monkeypatch):
    """stdout as under PYTHONUNBUFFERED (a CI runner's or a launcher's setting), over a pipe whose
    writes are recorded."""
    read_fd, write_fd = os.pipe()
    writes: list[bytes] = []
    real_write = os.write

    def recording_write(fd, data):
        if fd == write_fd:
            writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording_write)
    raw = io.FileIO(write_fd, "wb", closefd=True)

    class Recorded(io.RawIOBase):  # FileIO writes through os.write's C twin: route it through ours
        def writable(self):
            return True

        def write(self, b):
            return os.write(write_fd, b)

        def fileno(self):
            return write_fd

    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(Recorded(), write_through=True))  # type: ignore[arg-type]
    return read_fd, raw, writes


def test_unbuffered_print_splits_a_line_and_say_json_does_not(monkeypatch):
    read_fd, raw, writes = _unbuffered_stdout(monkeypatch)
    try:
        print(json.dumps({"stage": "job"}), flush=True)
        assert len(writes) == 2  # the text, then its newline: two members' lines could interleave
        writes.clear()
        say_json({"stage": "job", "records": 1714})
        assert writes == [b'{"stage": "job", "records": 1714}\n']
    finally:
        sys.stdout.flush()
        raw.close()
        os.close(read_fd)


def test_a_stdout_with_no_file_under_it_gets_the_line(monkeypatch):
    # A caller's or a test's stream (pytest's capsys): nobody else writes to it.
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    say_json({"stage": "node", "records": 3})
    assert out.getvalue() == '{"stage": "node", "records": 3}\n'
