"""Where kernel lines come from: /dev/kmsg records, a kernel log file, dmesg."""

from __future__ import annotations

import os
import shutil

import pytest

from faultlens.collectors.file_follower import MAX_LINE_BYTES
from faultlens.collectors.kernel_follower import DmesgReader, KernelFileReader, KmsgReader, kmsg_line, open_kernel_reader
from tests.progress import wait_until


def test_kmsg_record_keeps_header_and_first_line_only():
    record = b"6,1234,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"
    assert kmsg_line(record) == "6,1234,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    assert kmsg_line(b"6,1,2,c;continued;with;semicolons") == "6,1,2,c;continued;with;semicolons"
    for garbage in (b"", b"no header here", b"a,b,c,d;text", b"6,1;short header", b"\xff\xfe\x00"):
        assert kmsg_line(garbage) is None


def test_kmsg_reader_counts_garbled_records(tmp_path):
    # A regular file stands in for the device: each read returns what is there, so one record.
    fake = tmp_path / "kmsg"
    fake.write_bytes(b"not a record")
    reader = KmsgReader(str(fake), from_start=True)
    assert reader.poll() == [] and reader.stats.garbled == 1
    reader.close()


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg not readable here")
def test_real_kmsg_from_start_reads_the_ring_and_from_end_reads_nothing_old():
    reader = KmsgReader(from_start=True)
    lines = reader.poll()
    reader.close()
    assert lines and all(kmsg_line(line.encode()) == line for line in lines)
    tail = KmsgReader()
    assert len(tail.poll()) < len(lines)
    tail.close()


def test_kernel_file_reader_follows_a_file(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("Nov 22 10:00:00 n1 kernel: old\n")
    reader = KernelFileReader(str(log))
    assert reader.poll() == []
    with open(log, "a") as f:
        f.write("Nov 22 10:00:01 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79\n")
    assert reader.poll() == ["Nov 22 10:00:01 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79"]
    reader.close()


def test_an_explicit_file_wins_and_a_missing_kmsg_falls_back_to_dmesg(tmp_path):
    log = tmp_path / "kern.log"
    log.touch()
    reader = open_kernel_reader(str(log))
    assert reader.name == "file"
    reader.close()
    if not shutil.which("dmesg"):
        pytest.skip("no dmesg here")
    reader = open_kernel_reader(kmsg_path=str(tmp_path / "no-kmsg"))
    assert isinstance(reader, DmesgReader)
    reader.close()


def test_dmesg_reader_reports_a_dead_dmesg_as_an_error(tmp_path):
    fake = tmp_path / "dmesg"
    fake.write_text("#!/bin/sh\necho '[    1.0] hello'\necho 'permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    reader = DmesgReader(binary=str(fake))
    lines: list[str] = []
    # Polled until its exit is seen (the error), waited for while lines come; a minute of nothing
    # fails, not 500 polls a loaded machine's slow shell start could outlast (issue 47).
    with pytest.raises(OSError, match="dmesg exited with status 1: permission denied"):
        wait_until(lambda: lines.extend(reader.poll()), progress=lambda: len(lines), stall_s=60, limit_s=240,
                   what="dmesg's exit to be seen", poll_s=0.01)
    assert lines == ["[    1.0] hello"]
    reader.close()


def test_dmesg_and_file_readers_agree_on_crlf_and_overlong_lines(tmp_path):
    """The same bytes read by `dmesg --follow` and from a kernel log file give the same lines: no
    \\r, a line over MAX_LINE_BYTES cut into pieces (none lost), an overlong unterminated line cut
    while it waits for its newline."""
    data = (b"[    1.000000] eth0: link up\r\n" + b"[    2.000000] " + b"a" * (2 * MAX_LINE_BYTES + 100) + b"\n"
            + b"[    3.000000] " + b"b" * (MAX_LINE_BYTES + 10))
    (tmp_path / "out.bin").write_bytes(data)
    fake = tmp_path / "dmesg"
    fake.write_text(f"#!/bin/sh\ncat '{tmp_path / 'out.bin'}'\nexec sleep 600\n")
    fake.chmod(0o755)
    reader = DmesgReader(binary=str(fake))
    lines: list[str] = []
    try:
        wait_until(lambda: len(lines) >= 5 or lines.extend(reader.poll()), progress=lambda: len(lines),
                   stall_s=60, limit_s=240, what="dmesg's lines", poll_s=0.01)
    finally:
        reader.close()
    (tmp_path / "kern.log").write_bytes(data)
    follower = KernelFileReader(str(tmp_path / "kern.log"), from_start=True)
    from_file = follower.poll()
    follower.close()
    head = "[    2.000000] " + "a" * (MAX_LINE_BYTES - 15)
    assert lines == from_file
    assert lines[:2] == ["[    1.000000] eth0: link up", head]
    assert [len(line) for line in lines[1:]] == [MAX_LINE_BYTES, MAX_LINE_BYTES, 115, MAX_LINE_BYTES]
    assert reader.stats.cut_lines == 3 and reader.stats.lines == 5
