"""The engine's thresholds that are data (diagnosis/engine/thresholds.toml): waves and debounce.

The shipped file is read first; a user's file (``--thresholds FILE``, env FAULTLENS_THRESHOLDS)
overrides the keys it names: a ``[wave]`` key replaces the shipped one, a ``[wave.causes]`` class
its list, and ``[[debounce]]`` entries are tried before the shipped ones (the first that matches
decides, so a user's ``count = 1`` turns a shipped debounce off for the rules it matches).
A file that says something the engine cannot use is refused with the key named, never half read.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from faultlens.events.diagnosis_record import FAULT_CLASSES

SHIPPED = Path(__file__).with_name("thresholds.toml")


class ThresholdsError(ValueError):
    """A thresholds file the engine cannot use; the message names the file and the key."""


@dataclass(frozen=True)
class WaveConfig:
    window_s: float = 60.0
    min_nodes: int = 8
    min_share: float = 0.25
    classes: frozenset[str] = frozenset()
    # (class or "default", the machine attributes that may name the cause), as pairs: the config is hashed
    causes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Across jobs (diagnosis/engine/fleet_waves.py, [wave.fleet]): candidates from at least this many jobs,
    # this many machines and this share of the machines the topologies put in the part; 0 jobs: off.
    fleet_min_jobs: int = 2
    fleet_min_nodes: int = 4
    fleet_min_share: float = 0.5

    def causes_of(self, fault: str) -> tuple[str, ...]:
        by_class = dict(self.causes)
        return by_class.get(fault, by_class.get("default", ()))


@dataclass(frozen=True)
class DebounceRule:
    match: str  # rule:<glob> or fault:<class>
    count: int = 2
    within_s: float = 600.0
    second_signal: bool = False

    def matches(self, rule: str, fault: str) -> bool:
        what, _, pattern = self.match.partition(":")
        if what == "fault":
            return fault == pattern
        return bool(rule) and fnmatch.fnmatchcase(rule, pattern)


@dataclass(frozen=True)
class Thresholds:
    wave: WaveConfig
    debounce: tuple[DebounceRule, ...] = ()
    sources: tuple[str, ...] = ()  # the files read, for what a diff or a log says

    def debounce_for(self, rule: str, fault: str) -> DebounceRule | None:
        """The first debounce entry that matches; None (or an entry with count 1): no debounce."""
        for entry in self.debounce:
            if entry.matches(rule, fault):
                return entry if entry.count > 1 or entry.second_signal else None
        return None


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ThresholdsError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ThresholdsError(f"{path}: not TOML: {exc}") from None


def _number(value: Any, where: str, *, low: float, high: float = float("inf"), integer: bool = False) -> Any:
    ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if not ok or not low <= value <= high:
        kind = "an integer" if integer else "a number"
        raise ThresholdsError(f"{where}: must be {kind} in [{low:g}, {high:g}], got {value!r}")
    return value if integer else float(value)


def _wave(raw: Mapping[str, Any], base: WaveConfig, origin: str) -> WaveConfig:
    unknown = set(raw) - {"window_s", "min_nodes", "min_share", "classes", "causes", "fleet"}
    if unknown:
        raise ThresholdsError(f"{origin}: [wave] has unknown key(s) {sorted(unknown)}")
    classes = base.classes
    if "classes" in raw:
        listed = raw["classes"]
        if not isinstance(listed, list) or any(c not in FAULT_CLASSES for c in listed):
            raise ThresholdsError(f"{origin}: wave.classes must list fault classes of docs/design.md §9, got {listed!r}")
        classes = frozenset(listed)
    causes = dict(base.causes)
    for fault, keys in (raw.get("causes") or {}).items():
        if fault != "default" and fault not in FAULT_CLASSES:
            raise ThresholdsError(f"{origin}: wave.causes.{fault}: not a fault class")
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            raise ThresholdsError(f"{origin}: wave.causes.{fault}: must be a list of machine attribute names")
        causes[fault] = tuple(keys)
    fleet = raw.get("fleet") or {}
    if not isinstance(fleet, dict) or set(fleet) - {"min_jobs", "min_nodes", "min_share"}:
        raise ThresholdsError(f"{origin}: [wave.fleet] takes min_jobs, min_nodes and min_share, got {fleet!r}")
    return WaveConfig(
        window_s=_number(raw.get("window_s", base.window_s), f"{origin}: wave.window_s", low=0.0, high=3600.0),
        min_nodes=_number(raw.get("min_nodes", base.min_nodes), f"{origin}: wave.min_nodes", low=2, integer=True),
        min_share=_number(raw.get("min_share", base.min_share), f"{origin}: wave.min_share", low=0.0, high=1.0),
        classes=classes, causes=tuple(causes.items()),
        fleet_min_jobs=_number(fleet.get("min_jobs", base.fleet_min_jobs), f"{origin}: wave.fleet.min_jobs", low=0,
                               integer=True),
        fleet_min_nodes=_number(fleet.get("min_nodes", base.fleet_min_nodes), f"{origin}: wave.fleet.min_nodes", low=2,
                                integer=True),
        fleet_min_share=_number(fleet.get("min_share", base.fleet_min_share), f"{origin}: wave.fleet.min_share",
                                low=0.0, high=1.0))


def _debounce(raw: Any, origin: str) -> tuple[DebounceRule, ...]:
    if not isinstance(raw, list):
        raise ThresholdsError(f"{origin}: [[debounce]] must be a list of tables")
    out = []
    for i, entry in enumerate(raw):
        where = f"{origin}: debounce[{i}]"
        if not isinstance(entry, dict):
            raise ThresholdsError(f"{where}: must be a table")
        unknown = set(entry) - {"match", "count", "within_s", "second_signal"}
        if unknown:
            raise ThresholdsError(f"{where}: unknown key(s) {sorted(unknown)}")
        match = entry.get("match")
        what, _, pattern = str(match).partition(":")
        if not isinstance(match, str) or what not in ("rule", "fault") or not pattern:
            raise ThresholdsError(f"{where}.match: 'rule:<glob>' or 'fault:<class>', got {match!r}")
        if what == "fault" and pattern not in FAULT_CLASSES:
            raise ThresholdsError(f"{where}.match: {pattern!r} is not a fault class")
        second = entry.get("second_signal", False)
        if not isinstance(second, bool):
            raise ThresholdsError(f"{where}.second_signal: must be true or false")
        out.append(DebounceRule(match, _number(entry.get("count", 2), f"{where}.count", low=1, integer=True),
                                _number(entry.get("within_s", 600.0), f"{where}.within_s", low=0.0), second))
    return tuple(out)


def load(paths: Iterable[str | Path] = ()) -> Thresholds:
    """The shipped thresholds with each file of ``paths`` laid over them in order."""
    files = [SHIPPED, *map(Path, paths)]
    wave = WaveConfig()
    debounce: tuple[DebounceRule, ...] = ()
    for path in files:
        doc = _read(path)
        unknown = set(doc) - {"wave", "debounce"}
        if unknown:
            raise ThresholdsError(f"{path}: unknown table(s) {sorted(unknown)} (wave, debounce)")
        if "wave" in doc:
            wave = _wave(doc["wave"], wave, str(path))
        if "debounce" in doc:
            debounce = _debounce(doc["debounce"], str(path)) + debounce  # a later file's entries win
    return Thresholds(wave, debounce, tuple(map(str, files)))


_shipped: Thresholds | None = None


def shipped() -> Thresholds:
    global _shipped
    if _shipped is None:
        _shipped = load()
    return _shipped
