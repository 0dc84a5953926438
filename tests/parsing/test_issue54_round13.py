"""Issue 54 round 13: the /dev/kmsg level read in every header form, and fresh batches 15 and 16
mined: each healthy line that fired closed by its general form, each miss by its program's own
format (docs/rules.md, round 13), beside its healthy look-alikes."""

from __future__ import annotations

import pytest

from faultlens.parsing.alarm import kernel_priority
from faultlens.parsing.kernel_log import KernelLogParser
from faultlens.parsing.registry import parser_for
from faultlens.parsing.timestamps import split_timestamp


def _events(line: str, source: str = "kernel") -> list:
    p = parser_for(source)
    return p.feed(line) + p.flush()


def _acting(line: str, source: str = "kernel") -> list:
    return [e for e in _events(line, source) if e.data.get("action") not in (None, "none")]


def _faults(line: str, source: str = "kernel") -> set:
    return {e.data.get("fault") for e in _acting(line, source)}


# --- the kmsg header with and without its flags field ------------------------------------------------
# Real messages (nvme pci.c nvme_timeout, ext4 __ext4_error, mlx5 cmd failure) behind the record header
# /dev/kmsg gives them (Documentation/ABI/testing/dev-kmsg: "prefix,seq,usec,flags;"), and behind the
# same header without its flags field, as relays and some readers pass it on.
_MESSAGES = [
    "nvme nvme0: I/O 12 QID 3 timeout, aborting",
    "EXT4-fs error (device sda1): ext4_find_entry:1455: inode #2: comm ls: reading directory lblock 0",
    "sd 2:0:0:0: [sdb] tag#0 FAILED Result: hostbyte=DID_OK driverbyte=DRIVER_SENSE",
]


@pytest.mark.parametrize("flags", [",-", ",c", ",+", ",-,caller=T412", ""])
@pytest.mark.parametrize("level", range(8))
def test_the_kmsg_level_is_read_with_or_without_flags(level: int, flags: str) -> None:
    raw = f"{level},902,1048771904{flags};{_MESSAGES[0]}"
    assert kernel_priority(raw) == level
    stamped = split_timestamp(raw)
    assert stamped.message == _MESSAGES[0]
    assert stamped.mono == pytest.approx(1048.771904)


def test_the_facility_bits_are_not_the_level() -> None:
    # prefix = facility * 8 + level: 14 is user.info, 11 user.err
    assert kernel_priority("14,3,104,-;systemd[1]: Started Journal Service.") == 6
    assert kernel_priority("11,4,105;systemd-udevd[312]: error opening ATTR") == 3


@pytest.mark.parametrize("message", _MESSAGES)
@pytest.mark.parametrize("flags", [",-", ""])
def test_an_info_kmsg_record_never_acts_on_its_own(message: str, flags: str) -> None:
    for level in (5, 6, 7):
        p = KernelLogParser(live_from=0)
        out = p.feed(f"{level},902,5000000000{flags};{message}")
        assert [e for e in out if e.data.get("action") not in (None, "none")] == [], (level, flags)


@pytest.mark.parametrize("message", _MESSAGES)
@pytest.mark.parametrize("flags", [",-", ""])
def test_an_err_kmsg_record_still_acts(message: str, flags: str) -> None:
    p = KernelLogParser(live_from=0)
    out = p.feed(f"3,902,5000000000{flags};{message}")
    assert [e for e in out if e.data.get("action") not in (None, "none")], flags


def test_an_err_record_with_no_error_word_reaches_the_fallback_without_flags() -> None:
    # The pre-filter lets a line with no literal through only on an err level; without flags that
    # level went unread and the line was skipped unseen.
    seen: list[str] = []
    p = KernelLogParser(live_from=0, on_unrecognised=seen.append)
    p.feed("3,77,5000000000;frobnicator 0000:3b:00.0: giving up on channel 2")
    assert seen == ["frobnicator 0000:3b:00.0: giving up on channel 2"]


@pytest.mark.parametrize("raw", ["6,902;too short", "6,a,101;not a header", "2024-01-31 06:00:01,902,101;csv"])
def test_what_is_not_a_kmsg_header_keeps_no_level(raw: str) -> None:
    assert kernel_priority(raw) is None


# --- what cried wolf ------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    # blkdev_issue_zeroout's fallback: the device lacks WRITE SAME, the kernel zeroes it itself
    "May 23 14:33:11 iv-splv-link kernel: [1728536.623544] sda1: WRITE SAME failed. Manually zeroing.",
    "[22118.009112] vda1: WRITE SAME failed. Manually zeroing.",
    # e1000e's PHY power state at resume; the driver goes on (netdev 2020-07-30)
    "Dec 12 09:22:32 peter-x1c kernel: e1000e 0000:00:1f.6 enp0s31f6: Failed to disable ULP",
    "[ 1663.694828] e1000e 0000:00:19.0 eth0: Failed to disable ULP",
    # an ACPI method the firmware lacks (pci-acpi.c)
    "[  226.391528] pcieport 0000:00:1c.0: ACPI _REG disconnect evaluation failed (5)",
    "[  226.391528] pcieport 0000:00:1c.0: ACPI _REG connect evaluation failed (5)",
])
def test_lines_that_cried_wolf_are_recorded(line: str) -> None:
    assert _acting(line) == []


@pytest.mark.parametrize(("line", "fault"), [
    # beside them, the same devices' faults still act
    ("[ 1665.093513] e1000e 0000:00:19.0 eth0: Hardware Error", "nic"),
    ("[ 1728.623544] blk_update_request: I/O error, dev sda, sector 2048 op 0x1:(WRITE) flags 0x0", "storage"),
])
def test_their_neighbours_still_act(line: str, fault: str) -> None:
    assert fault in _faults(line)
