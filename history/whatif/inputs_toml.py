"""A projection's TOML file, checked by type and range before anything is built from it.

Every mistake is one line naming the file, the key and what was expected (``ValueError``: the
command's exit 2): a boolean must be ``true`` / ``false``, a count an integer, a time a number >= 0.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from faultlens.history.whatif.model import FaultClass, Recovery, Scenario
from faultlens.history.whatif.provenance import Input, Kind, mark

# key -> (kind, lowest, highest, what it is); kind: "int", "float", "bool", "str"
_TOP = {
    "gpus": ("int", 1, None, "GPUs"), "gpus_per_node": ("int", 1, None, "GPUs per machine"),
    "days": ("float", 0, None, "days"), "checkpoint_interval_s": ("float", 0, None, "seconds"),
    "checkpoint_stall_s": ("float", 0, None, "seconds"), "spares": ("int", 0, None, "machines"),
    "spare_return_days": ("float", 0, None, "days"), "name": ("str", None, None, "a name"),
}
_RECOVERY = {k: ("float", 0, None, "seconds") for k in Recovery.__dataclass_fields__}
_FAULT = {
    "name": ("str", None, None, "a class name"), "rate": ("float", 0, None, "faults per node-day"),
    "detect_s": ("float", 0, None, "seconds"), "localise_s": ("float", 0, None, "seconds"),
    "evict_share": ("float", 0, 1, "a share"), "over_evict": ("float", 0, None, "machines"),
    "slowdown": ("float", 0, 1, "a share"), "loses_work": ("bool", None, None, ""),
    "planned": ("bool", None, None, ""), "timeout_s": ("float", 0, None, "seconds"),
    "manual_localise_s": ("float", 0, None, "seconds"), "stop_time": ("bool", None, None, ""),
}
# Where zero is no answer: a job of zero days, an interval of zero seconds.
_POSITIVE = {"days", "checkpoint_interval_s", "spare_return_days"}


def check(where: str, key: str, value: Any, spec: tuple) -> Any:
    """``value`` as ``spec`` wants it, or a ValueError naming ``where`` and ``key``."""
    kind, low, high, what = spec
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{where}: {key} must be true or false, got {value!r}")
        return value
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise ValueError(f"{where}: {key} must be a non-empty string, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind == "int" and not isinstance(value, int)):
        expected = "an integer" if kind == "int" else "a number"
        raise ValueError(f"{where}: {key} must be {expected} ({what}), got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: {key} must be finite, got {value!r}")
    tail = key.rsplit(".", 1)[-1]
    if low is not None and (value < low or (tail in _POSITIVE and value <= 0)):
        op = ">" if tail in _POSITIVE else ">="
        raise ValueError(f"{where}: {key} must be {op} {low} ({what}), got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{where}: {key} must be <= {high} ({what}), got {value!r}")
    return value if kind == "int" else float(value)


def _table(where: str, prefix: str, data: Any, spec: dict[str, tuple]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: {prefix} must be a table")
    unknown = sorted(set(data) - set(spec))
    if unknown:
        raise ValueError(f"{where}: {prefix}: unknown keys {unknown} (known: {sorted(spec)})")
    return {k: check(where, f"{prefix}.{k}", v, spec[k]) for k, v in data.items()}


def from_toml(path: str | Path, base: Scenario | None) -> Scenario:
    """A scenario from TOML: top-level scalars, a ``[recovery]`` table and ``[[faults]]`` tables
    (the classes, replacing the base's) or ``[faults.NAME]`` tables (changing one of the base's)."""
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    unknown = sorted(set(data) - set(_TOP) - {"recovery", "faults"})
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown} (known: {sorted(_TOP) + ['faults', 'recovery']})")
    given: dict[str, Any] = {k: check(where, k, data[k], _TOP[k]) for k in _TOP if k in data}
    changes: dict[str, Any] = dict(given)
    if "recovery" in data:
        rec = _table(where, "recovery", data["recovery"], _RECOVERY)
        changes["recovery"] = replace(base.recovery if base else Recovery(), **rec)
        given.update({f"recovery.{k}": v for k, v in rec.items()})
    faults = data.get("faults")
    scenario = base
    if isinstance(faults, list):
        built = []
        for i, table in enumerate(faults):
            fields = _table(where, f"faults[{i}]", table, _FAULT)
            missing = [k for k in ("name", "rate", "detect_s") if k not in fields]
            if missing:
                raise ValueError(f"{where}: faults[{i}] needs {', '.join(missing)}")
            built.append(FaultClass(**fields))
            given.update({f"faults.{fields['name']}.{k}": v for k, v in fields.items() if k != "name"})
        changes["faults"] = tuple(built)
        if base is not None:   # the base's classes, and what was said of them, are gone
            base = replace(base, provenance={k: v for k, v in base.provenance.items() if not k.startswith("faults.")})
            scenario = base
    elif isinstance(faults, dict):
        if base is None:
            raise ValueError(f"{where}: [faults.NAME] changes a preset's class; give --preset or [[faults]]")
        scenario = base
        for name, table in faults.items():
            if name not in {f.name for f in base.faults}:
                raise ValueError(f"{where}: faults.{name}: no such class in the preset "
                                 f"(it has {sorted(f.name for f in base.faults)})")
            fields = _table(where, f"faults.{name}", table, {k: v for k, v in _FAULT.items() if k != "name"})
            scenario = scenario.with_fault(name, **fields)
            given.update({f"faults.{name}.{k}": v for k, v in fields.items()})
    elif faults is not None:
        raise ValueError(f"{where}: faults must be [[faults]] tables or [faults.NAME] tables")
    if scenario is None:
        missing = [k for k in ("gpus", "days", "faults") if k not in changes]
        if missing:
            raise ValueError(f"{where}: without a preset the file needs gpus, days and [[faults]] "
                             f"(missing: {', '.join(missing)})")
        scenario = Scenario(**changes)
    else:
        scenario = replace(scenario, **changes)
    for key in given:
        scenario = mark(scenario, key, Input(Kind.GIVEN, where))
    return scenario
