"""The diagnosis engine's flags, built in one place for every command that runs the engine.

`diagnose` and `up` (live), `analyze`, `score` and `history --from-trace` (offline) all take these
flags and build their :class:`EngineConfig` with :func:`engine_config`, so a live run started with
``--hang-floor 15`` is reproduced offline by passing the same flag (tests/test_engine_flags.py).
Flags win over ``FAULTLENS_*`` environment variables, which win over the defaults.
"""

from __future__ import annotations

import argparse
import os

from faultlens.diagnosis.engine.core import EngineConfig
from faultlens.diagnosis.engine.implicit import ImplicitConfig
from faultlens.diagnosis.engine.thresholds import ThresholdsError
from faultlens.diagnosis.engine.thresholds import load as load_thresholds
from faultlens.diagnosis.hang.detector import HangConfig
from faultlens.events.env_number import env_number
from faultlens.parsing.rules import RuleError, load

_DEFAULTS = EngineConfig()
_HANG = HangConfig()


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("diagnosis engine (the same flags on diagnose, up, analyze, score, history)")
    g.add_argument("--grace", type=float, default=env_number("FAULTLENS_DIAGNOSE_GRACE_S", _DEFAULTS.grace_s, on_bad="raise"),
                   help=f"seconds a job may send nothing before its time moves: of the time of jobs on its "
                        f"clock, or live, of wall time once nothing on its clock arrives; the job's clock only, "
                        f"not when a node is silent (--silence-grace) "
                        f"(default {_DEFAULTS.grace_s:g}; env FAULTLENS_DIAGNOSE_GRACE_S)")
    g.add_argument("--silence-grace", type=float,
                   default=env_number("FAULTLENS_SILENCE_GRACE_S", _DEFAULTS.silence_grace_s, on_bad="raise"),
                   help=f"seconds of a job's time a node may report nothing (heartbeats, steps) while its peers "
                        f"report on before it is node_silent (evicted), and the whole job before it is "
                        f"telemetry_lost (default {_DEFAULTS.silence_grace_s:g}; env FAULTLENS_SILENCE_GRACE_S)")
    g.add_argument("--max-lateness", type=float,
                   default=env_number("FAULTLENS_MAX_LATENESS_S", _DEFAULTS.max_lateness_s, on_bad="raise"),
                   help=f"an event this many seconds behind its job's event time is too late to judge "
                        f"(default {_DEFAULTS.max_lateness_s:g}; env FAULTLENS_MAX_LATENESS_S)")
    g.add_argument("--no-implicit", action="store_true", default=os.environ.get("FAULTLENS_NO_IMPLICIT") == "1",
                   help="turn off hang / fail-slow localisation (env FAULTLENS_NO_IMPLICIT=1)")
    g.add_argument("--no-peer-model", action="store_true", default=os.environ.get("FAULTLENS_NO_PEER_MODEL") == "1",
                   help="rules only: turn off the peer model (isolation forest and slow-drift suspects; the robust "
                        "z-score threshold stays) (env FAULTLENS_NO_PEER_MODEL=1)")
    g.add_argument("--hang-floor", type=float, default=env_number("FAULTLENS_HANG_FLOOR_S", _HANG.floor_s, on_bad="raise"),
                   help=f"never call a stall shorter than this many seconds a hang "
                        f"(default {_HANG.floor_s:g}; env FAULTLENS_HANG_FLOOR_S)")
    g.add_argument("--rules", action="append", metavar="FILE",
                   default=[p for p in os.environ.get("FAULTLENS_RULES", "").split(os.pathsep) if p],
                   help="a TOML log-line catalogue of your own (format: parsing/rules.toml), tried after the shipped "
                        "rules when raw lines are parsed; repeatable (env FAULTLENS_RULES, paths joined by ':')")
    g.add_argument("--thresholds", action="append", metavar="FILE",
                   default=[p for p in os.environ.get("FAULTLENS_THRESHOLDS", "").split(os.pathsep) if p],
                   help="a TOML file of thresholds of your own (format: diagnosis/engine/thresholds.toml: waves across "
                        "machines, debounce of grey evidence), laid over the shipped ones; repeatable "
                        "(env FAULTLENS_THRESHOLDS, paths joined by ':')")
    g.add_argument("--hang-k", type=float, default=env_number("FAULTLENS_HANG_K", _HANG.k, on_bad="raise"),
                   help=f"a stall is a hang after this many median step times (default {_HANG.k:g}; env FAULTLENS_HANG_K)")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine settings the flags of :func:`add_engine_arguments` name."""
    hang = HangConfig(k=args.hang_k, floor_s=args.hang_floor)
    paths = getattr(args, "rules", None) or []
    try:
        line_rules = load(paths) if paths else None
    except RuleError as exc:
        raise SystemExit(f"faultlens: {exc}") from None
    files = getattr(args, "thresholds", None) or []
    try:
        thresholds = load_thresholds(files) if files else None
    except ThresholdsError as exc:
        raise SystemExit(f"faultlens: {exc}") from None
    return EngineConfig(grace_s=args.grace, silence_grace_s=args.silence_grace, max_lateness_s=args.max_lateness, implicit=not args.no_implicit,
                        implicit_config=ImplicitConfig(hang=hang), peer_model=not args.no_peer_model, line_rules=line_rules,
                        thresholds=thresholds)
