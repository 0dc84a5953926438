"""The pure-core contract (pyproject's "detectors and remediation policy cannot reach Kafka") covers
every module that decides: each room of diagnosis/ by folder, and each module of remediation/ by
name but the few at its edge, named here with why. A new remediation module fails here until it
is put on one side or the other, so the contract cannot fall behind the folder."""

from __future__ import annotations

import tomllib

from tests.layout import ROOT

CONTRACT = "detectors and remediation policy cannot reach Kafka"

# Modules of remediation/ that may reach Kafka or the world outside, and why.
REMEDIATION_EDGE = {
    "consumer": "the Kafka loop that feeds the policy and sends its commands",
    "state_log": "the policy's state kept on a compacted topic",
    "fleet_log": "the fleet record kept on its topic",
    "actuators": "carries decisions out on the scheduler (script, Slurm, Kubernetes)",
}


def _contract() -> dict:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [pure] = [c for c in contracts if c["name"] == CONTRACT]
    return pure


def test_every_remediation_module_is_pure_or_named_as_the_edge():
    covered = set(_contract()["source_modules"])
    names = {p.stem for p in (ROOT / "remediation").glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in (ROOT / "remediation").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    unplaced = sorted(n for n in names if n not in REMEDIATION_EDGE and f"faultlens.remediation.{n}" not in covered)
    assert not unplaced, (f"remediation modules neither in the contract {CONTRACT!r} nor in REMEDIATION_EDGE: "
                          f"{unplaced}")
    stale = sorted(n for n in REMEDIATION_EDGE if n not in names)
    assert not stale, f"REMEDIATION_EDGE names modules that are gone: {stale}"


def test_every_diagnosis_room_but_the_edge_is_pure():
    covered = set(_contract()["source_modules"])
    rooms = {p.name for p in (ROOT / "diagnosis").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {f"faultlens.diagnosis.{room}" for room in rooms - {"edge"}} <= covered
    assert not any(m.startswith("faultlens.diagnosis.edge") for m in covered)
