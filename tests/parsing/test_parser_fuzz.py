"""Fuzz every parser: random text, bytes and mangled real lines never raise, and the counters add up."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.testbed import log_samples as S
from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES
from faultlens.events.envelope import Envelope, encode
from faultlens.parsing.line import clean_line
from faultlens.parsing.registry import LineEventParser, parser_for
from faultlens.parsing.timestamps import split_timestamp
from faultlens.parsing.xid_table import lookup

REAL = [v for k, v in vars(S).items() if k.isupper() and isinstance(v, str)]
REAL += [x for k, v in vars(S).items() if k.isupper() and isinstance(v, list) for x in v]

# Derandomized unless FAULTLENS_HYPOTHESIS_EXPLORE is set (tests/history/test_whatif_properties.py says why).
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=not os.environ.get("FAULTLENS_HYPOTHESIS_EXPLORE"))


@st.composite
def mangled(draw) -> str:
    """A real line cut, spliced with noise, or glued to another: what torn writes look like."""
    line = draw(st.sampled_from(REAL))
    how = draw(st.sampled_from(["cut", "splice", "glue", "noise", "bytes"]))
    if how == "cut":
        return line[: draw(st.integers(0, len(line)))]
    if how == "splice":
        at = draw(st.integers(0, len(line)))
        return line[:at] + draw(st.text(max_size=20)) + line[at:]
    if how == "glue":
        other = draw(st.sampled_from(REAL))
        return line[: draw(st.integers(0, len(line)))] + other[draw(st.integers(0, len(other))):]
    if how == "bytes":
        return draw(st.binary(max_size=200)).decode("utf-8", errors="replace")
    return draw(st.text(max_size=300))


lines_strategy = st.lists(st.one_of(mangled(), st.text(max_size=200), st.sampled_from(REAL)), max_size=40)


def _check(source: str, lines: list[str]) -> None:
    parser = parser_for(source)
    events = []
    for line in lines:
        events += parser.feed(line)
    events += parser.flush()
    s = parser.stats
    assert s.lines == len(lines)
    assert s.lines == s.recognised + s.skipped + s.garbled
    assert s.events == len(events)
    for e in events:
        assert e.source == source
        assert e.data["fault"] in FAULT_CLASSES, e
        assert e.data["action"] in ACTIONS, e
        assert isinstance(e.data["line"], str)
        # Every event must survive the wire format.
        encode(Envelope(ts=1.8e9, job="j", node="n", source=e.source, kind=e.kind, data=e.data))


@FUZZ
@given(lines_strategy)
def test_kernel_parser_never_raises(lines):
    _check("kernel", lines)


@FUZZ
@given(lines_strategy)
def test_trainer_parser_never_raises(lines):
    _check("nccl", lines)


@FUZZ
@given(st.text(max_size=200))
def test_timestamps_never_raise(line):
    s = split_timestamp(line)
    assert isinstance(s.message, str)
    assert s.ts is None or 0 <= s.ts < 4102444800 * 2


@FUZZ
@given(st.one_of(st.text(max_size=50), st.binary(max_size=50), st.none(), st.integers()))
def test_clean_line_never_raises(value):
    out = clean_line(value)
    assert out is None or isinstance(out, str)


@FUZZ
@given(st.integers(-10**6, 10**6), st.one_of(st.none(), st.integers(0, 2**32 - 1)), st.one_of(st.none(), st.integers(0, 2**32 - 1)))
def test_xid_lookup_never_raises(code, intrinfo, status):
    info = lookup(code, intrinfo, error_status=status)
    assert info.fault in FAULT_CLASSES and info.action in ACTIONS


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["n1", "n2"]), st.sampled_from(["kernel", "nccl"]), mangled()), max_size=30))
def test_line_event_parser_never_raises(items):
    lp = LineEventParser()
    for i, (node, source, line) in enumerate(items):
        env = Envelope(ts=1.8e9, job="j", node=node, source=source, kind="line", data={"line": line}, id=f"r{i}")
        for out in lp.parse(env):
            assert out.node == node and out.id.startswith(f"r{i}.")
    lp.flush()
