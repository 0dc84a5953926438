"""Timestamp prefixes of kernel and trainer logs."""

from __future__ import annotations

import calendar
import time

import pytest

from faultlens.parsing.timestamps import split_timestamp

T = calendar.timegm((2026, 11, 22, 10, 11, 12, 0, 0, 0))  # 2026-11-22T10:11:12Z
NOW = T + 3600


@pytest.mark.parametrize(
    "line, ts, mono, message",
    [
        ("[12345.678901] NVRM: hello", None, 12345.678901, "NVRM: hello"),
        ("[    3.000001] x", None, 3.000001, "x"),
        ("6,1234,5678901234,-;NVRM: hello", None, 5678.901234, "NVRM: hello"),
        ("6,1235,5678901234,c;mlx5_core 0000:5e:00.0: x", None, 5678.901234, "mlx5_core 0000:5e:00.0: x"),
        ("2026-11-22T10:11:12,123456+00:00 NVRM: hello", T + 0.123456, None, "NVRM: hello"),
        ("2026-11-22T11:11:12,500000+01:00 msg", T + 0.5, None, "msg"),
        ("[Sun Nov 22 10:11:12 2026] NVRM: hello", T, None, "NVRM: hello"),
        ("Nov 22 10:11:12 gpu-node-17 kernel: NVRM: hello", T, None, "NVRM: hello"),
        ("Nov 22 10:11:12 gpu-node-17 kernel: [ 9.5] NVRM: hello", T, 9.5, "NVRM: hello"),
        ("2026-11-22T10:11:12+0000 gpu-node-17 kernel: NVRM: hello", T, None, "NVRM: hello"),
        ("2026-11-22T10:11:12.250000+00:00 gpu-node-17 kernel: NVRM: hello", T + 0.25, None, "NVRM: hello"),
        ("[2026-11-22 10:11:12,345] torch.distributed.run: msg", T + 0.345, None, "torch.distributed.run: msg"),
        ("2026-11-22 10:11:12,345 - train - INFO - step 1", T + 0.345, None, "- train - INFO - step 1"),
        ("no clock here", None, None, "no clock here"),
        ("", None, None, ""),
    ],
)
def test_forms(line, ts, mono, message):
    s = split_timestamp(line, now=NOW)
    assert s.message == message
    assert s.ts == (pytest.approx(ts) if ts is not None else None)
    assert s.mono == (pytest.approx(mono) if mono is not None else None)


def test_glog_keeps_its_header_in_the_message():
    s = split_timestamp("[E1122 10:11:12.345678 1234 ProcessGroupNCCL.cpp:632] boom", now=NOW)
    assert s.ts == pytest.approx(T + 0.345678)
    assert s.message.startswith("[E1122")


def test_yearless_stamp_from_the_future_is_last_year():
    # A December line read on 1 January belongs to the year before.
    jan1 = calendar.timegm((2027, 1, 1, 0, 30, 0, 0, 0, 0))
    s = split_timestamp("Dec 31 23:59:59 host kernel: x", now=jan1)
    assert s.ts == calendar.timegm((2026, 12, 31, 23, 59, 59, 0, 0, 0))


@pytest.mark.parametrize(
    "line",
    ["[Sun Foo 99 99:99:99 2026] x", "2026-13-45T99:99:99,1+00:00 x", "Nov 99 10:11:12 host kernel: x", "[E9999 99:99:99.1 1 f] x"],
)
def test_impossible_dates_are_not_clocks(line):
    s = split_timestamp(line, now=NOW)
    assert s.ts is None


def _reference_epoch(year: int, month: int, day: int, hh: int, mm: int, ss: int, frac: str | None) -> float | None:
    """What a clock means, straight from calendar.timegm (the parser caches minutes; it must agree)."""
    try:
        value = float(calendar.timegm((year, month, day, hh, mm, ss, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None
    if not (1 <= month <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 61):
        return None
    return value + (int(frac) / 10 ** len(frac) if frac else 0.0)


def test_cached_clocks_agree_with_timegm_on_every_field_value():
    import random

    rng = random.Random(7)
    months = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    for _ in range(4000):
        # Mostly real values, some impossible ones (day 0, 31 Feb, hour 24, second 60/61, month 13).
        y, mo, d = rng.choice((1999, 2026, 2027, 2028)), rng.randint(0, 13), rng.randint(0, 32)
        hh, mm, ss = rng.randint(0, 25), rng.randint(0, 61), rng.randint(0, 62)
        frac = rng.choice(("", "5", "345", "123456"))
        iso = f"{y:04d}-{mo:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}{'.' + frac if frac else ''}+00:00 host kernel: x"
        want = _reference_epoch(y, mo, d, hh, mm, ss, frac or None)
        got = split_timestamp(iso, now=NOW)
        assert got.ts == want, iso
        assert got.message == ("x" if want is not None else iso), iso
        if 1 <= mo <= 12:
            ctime = f"[Sun {months[mo - 1]} {d:2d} {hh:02d}:{mm:02d}:{ss:02d} {y}] x"
            assert split_timestamp(ctime, now=NOW).ts == _reference_epoch(y, mo, d, hh, mm, ss, None), ctime
            # No year on the line: now's, or the year before when that is more than a day ahead.
            now = float(rng.choice((NOW, calendar.timegm((2027, 1, 1, 0, 30, 0, 0, 0, 0)), calendar.timegm((2028, 12, 31, 23, 0, 0)))))
            year = time.gmtime(now).tm_year
            ahead = _reference_epoch(year, mo, d, 0, 0, 0, None)
            year -= 1 if ahead is not None and ahead > now + 86400 else 0
            syslog = f"{months[mo - 1]} {d:2d} {hh:02d}:{mm:02d}:{ss:02d} host kernel: x"
            assert split_timestamp(syslog, now=now).ts == _reference_epoch(year, mo, d, hh, mm, ss, None), (syslog, now)
            glog = f"E{mo:02d}{d:02d} {hh:02d}:{mm:02d}:{ss:02d}.{frac or '0'} 1234 f.cpp:1] x"
            assert split_timestamp(glog, now=now).ts == _reference_epoch(year, mo, d, hh, mm, ss, frac or "0"), (glog, now)


def test_a_february_syslog_line_is_not_taken_for_glog():
    # "Feb" starts with glog's severity letter F; the line was left without a clock before.
    s = split_timestamp("Feb 22 10:11:12 gpu-node-17 kernel: NVRM: hello", now=NOW)
    assert s.ts == calendar.timegm((2026, 2, 22, 10, 11, 12, 0, 0, 0))
    assert s.message == "NVRM: hello"
