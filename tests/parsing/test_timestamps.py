"""Timestamp prefixes of kernel and trainer logs."""

from __future__ import annotations

import calendar

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
