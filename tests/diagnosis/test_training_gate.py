"""The training rule's gate (issue 56): a step value below factor × its window's minimum, below
zero or of a signed series is kept without the spike test's full path. That may only skip work
whose result is "nothing": held here record by record against the rule with every value judged
in full, over every foreign trace and every loss curve of tests/fixtures/loss_curves (spikes,
NaNs, signed surrogates, near-zero tails among them)."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest

from bench.testbed import foreign
from faultlens.diagnosis.rules import training
from faultlens.diagnosis.rules.training import TrainingRule
from faultlens.events.envelope import Envelope
from tests.diagnosis.test_loss_stalled_curves import CURVES, FRESH, read_curve


def _curves() -> list[Path]:
    """Every curve but those of a sealed batch (a freshN folder not yet in FRESH): they judge, unread."""
    opened = {p.name for p in FRESH}
    return sorted(p for p in CURVES.rglob("*") if p.suffix in (".csv", ".log")
                  and not any(part.startswith("fresh") and part not in opened for part in p.relative_to(CURVES).parts))  # fmt: skip


def _names() -> list[str]:
    """The cases by name only: collecting them reads no trace (every xdist worker collects this file; loading the
    foreign traces alone is ~13 CPU-s), the one worker that runs them loads each once (:func:`_events`)."""
    return ([f"foreign/{name}" for name in foreign.names()]
            + [f"loss_curves/{path.relative_to(CURVES)}" for path in _curves()])


@functools.cache
def _events(name: str) -> list[Envelope]:
    kind, rest = name.split("/", 1)
    if kind == "foreign":
        return [e for e in foreign.load(rest).events if e.source in TrainingRule.sources]
    try:
        events, _ = read_curve(CURVES / rest)
    except AssertionError:  # a fixture with no loss line this reader parses (a README-like file)
        pytest.skip(f"{rest}: no loss line the curve reader parses")
    return events


def _run(events: list[Envelope]) -> tuple[list, dict, int]:
    """Each event's findings, the baselines at the end, and how many values went the full way."""
    rule = TrainingRule()
    judged = 0
    judge = rule._judge

    def counted(*args):
        nonlocal judged
        judged += 1
        judge(*args)

    rule._judge = counted  # type: ignore[method-assign]
    found = [[f.to_event(f"{e.id}.f{i}") for i, f in enumerate(rule.observe(e))] for e in events]
    state = {(job, rank): [(list(b.values), list(b.recent), b.least, b.peak, b.signed) for b in series]
             for job, ranks in rule._series.items() for rank, series in ranks.items()}
    return found, state, judged


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN (a baseline's least may be inf; no value kept is NaN, but be plain)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


NAMES = _names()


def test_the_cases_have_faults_the_gate_must_not_hide():
    findings = {f.data["fault"] for name in NAMES for per in _run(_events(name))[0] for f in per}
    assert {"loss_spike", "nan_loss"} <= findings


@pytest.mark.parametrize("name", NAMES)
def test_the_gated_rule_finds_what_the_rule_judging_every_value_finds(name, monkeypatch):
    events = _events(name)
    gated, gated_state, judged = _run(events)
    with monkeypatch.context() as m:
        m.setattr(training, "isfinite", lambda value: False)  # the gate never opens: every value judged in full
        full, full_state, all_judged = _run(events)
    assert gated == full, name
    assert gated_state.keys() == full_state.keys()
    for key in full_state:
        for got, want in zip(gated_state[key], full_state[key], strict=True):
            assert all(_same(g, w) for g, w in zip(got, want, strict=True)), (name, key)
    values = sum(1 for e in events if e.kind == "step" for k in ("loss", "grad_norm") if e.data.get(k) is not None)
    assert all_judged == values
    # The gate only ever skips a finite value: a run NaN from its first log has nothing it may skip.
    if sum(1 for e in events if e.kind == "step" and _finite(e.data.get("loss"))) > 100:
        assert judged < values, f"{name}: the gate never opened"


def _finite(value: object) -> bool:
    try:
        return math.isfinite(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
