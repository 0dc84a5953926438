"""`faultlens check` and its pytest plugin share this: run the detectors on a trace, compare with
its ``TRACE.expect.jsonl`` (diagnosis.replay.expect), and say how they differ in words a person reads."""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from faultlens.diagnosis.engine.core import EngineConfig
from faultlens.diagnosis.engine.offline import analyze_trace
from faultlens.diagnosis.replay.expect import (
    EXPECT_SUFFIX,
    ONSET_SLACK_S,
    CheckResult,
    Verdict,
    compare,
    expect_path,
    read_expect,
    trace_of,
    verdicts_of,
    write_expect,
)
from faultlens.events.diagnosis_record import Diagnosis


@dataclass(frozen=True)
class TraceCheck:
    trace: Path
    expect: Path
    result: CheckResult | None = None
    error: str | None = None  # the trace or expect file could not be read
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and self.result.ok

    def to_dict(self) -> dict:
        out = {"trace": str(self.trace), "expect": str(self.expect), "ok": self.ok, "seconds": round(self.seconds, 3)}
        if self.error:
            out["error"] = self.error
        if self.result is not None:
            out.update(self.result.to_dict())
        return out


def traces_in(paths: Iterable[str | os.PathLike[str]], *, new: bool = False) -> list[Path]:
    """The traces to check: files as given (a trace or its expect file), folders searched for expect
    files; with ``new`` (writing expectations) folders are searched for Parquet traces instead."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.rglob("*.parquet")) if new else [trace_of(e) for e in sorted(p.rglob(f"*{EXPECT_SUFFIX}"))]
            out.extend(found)
        elif p.name.endswith(EXPECT_SUFFIX):
            out.append(trace_of(p))
        else:
            out.append(p)
    return out


def named_traces(paths: Iterable[str | os.PathLike[str]]) -> set[Path]:
    """The traces ``paths`` name one by one (not found in a folder)."""
    return {t for p in paths if not Path(p).is_dir() for t in traces_in([p])}


def traces_without_expect(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The Parquet traces in the folders of ``paths`` that have no expect file yet."""
    return [t for t in traces_in([p for p in paths if Path(p).is_dir()], new=True) if not expect_path(t).exists()]


def _analyze(trace: Path, config: EngineConfig | None) -> list[Diagnosis]:
    found, _ = analyze_trace(trace, config=config)
    return found


def check_trace(trace: str | os.PathLike[str], config: EngineConfig | None = None) -> TraceCheck:
    trace = Path(trace)
    expect = expect_path(trace)
    start = time.monotonic()
    try:
        expected = read_expect(expect)
    except FileNotFoundError:
        return TraceCheck(trace, expect, error=f"no expect file {expect} (write one with `faultlens check --expect {trace}`)")
    except (OSError, ValueError) as exc:
        return TraceCheck(trace, expect, error=str(exc))
    try:
        found = _analyze(trace, config)
    except (OSError, ValueError) as exc:  # TraceError is a ValueError
        return TraceCheck(trace, expect, error=f"cannot read the trace: {exc}")
    return TraceCheck(trace, expect, result=compare(expected, found), seconds=time.monotonic() - start)


def write_expectations(trace: str | os.PathLike[str], config: EngineConfig | None = None, *,
                       slack_s: float = ONSET_SLACK_S) -> tuple[Path, list[Verdict]]:
    verdicts = verdicts_of(_analyze(Path(trace), config), slack_s=slack_s)
    return write_expect(expect_path(trace), verdicts, trace=Path(trace).name, slack_s=slack_s), verdicts


# --- words ------------------------------------------------------------------------------------------

def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z"


def _nodes(nodes: Iterable[str]) -> str:
    nodes = sorted(nodes)
    return "[" + " ".join(nodes) + "]" if nodes else "[no node]"


def describe_verdict(v: Verdict) -> str:
    mid = (v.onset_from + v.onset_to) / 2
    return f"{v.job} {v.fault} → {v.action} {_nodes(v.nodes)}, onset {_when(mid)} ±{(v.onset_to - v.onset_from) / 2:.0f}s"


def describe_found(d: Diagnosis) -> str:
    return f"{d.job} {d.fault} → {d.action} {_nodes(d.nodes)}, onset {_when(d.onset)} (confidence {d.confidence:.2f})"


def render(check: TraceCheck) -> str:
    """A few lines per trace: `-` expected but not found, `+` found but not expected, `~` changed."""
    head = f"{'ok  ' if check.ok else 'FAIL'} {check.trace}"
    if check.error:
        return f"{head}: {check.error}"
    r = check.result
    assert r is not None
    if r.ok:
        return f"{head}: {len(r.matched)} verdict(s) as expected"
    lines = [f"{head}: {len(r.missing)} missing, {len(r.extra)} extra, {len(r.changed)} changed "
             f"(of {len(r.expected)} expected; expect file {check.expect})"]
    lines += [f"  - missing  {describe_verdict(v)}" for v in r.missing]
    lines += [f"  + extra    {describe_found(d)}" for d in r.extra]
    for c in r.changed:
        parts = []
        if "action" in c.what:
            parts.append(f"action {c.expected.action} → {c.found.action}")
        if "nodes" in c.what:
            parts.append(f"nodes {_nodes(c.expected.nodes)} → {_nodes(c.found.nodes)}")
        if "onset" in c.what:
            parts.append(f"onset {_when(c.found.onset)}, outside the expected "
                         f"{_when(c.expected.onset_from)} .. {_when(c.expected.onset_to)}")
        # Named by its expected action: one fault's alert and eviction may both change, alike otherwise.
        lines.append(f"  ~ changed  {c.expected.job} {c.expected.fault} → {c.expected.action}: " + "; ".join(parts))
    lines += [f"  ! a machine no expected verdict evicts is evicted: {job} {node}" for job, node in r.healthy_evicted]
    return "\n".join(lines)


def junit_xml(checks: list[TraceCheck]) -> bytes:
    """JUnit XML for CI systems: one testcase per trace; a difference is a failure, an unreadable file an error."""
    suite = ET.Element("testsuite", name="faultlens check", tests=str(len(checks)),
                       failures=str(sum(1 for c in checks if not c.ok and not c.error)),
                       errors=str(sum(1 for c in checks if c.error)),
                       time=f"{sum(c.seconds for c in checks):.3f}")
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname="faultlens.check", name=str(c.trace), time=f"{c.seconds:.3f}")
        if c.error:
            ET.SubElement(case, "error", message=c.error).text = c.error
        elif not c.ok:
            text = render(c)
            ET.SubElement(case, "failure", message=text.splitlines()[0]).text = text
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)
