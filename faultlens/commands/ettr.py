"""faultlens ettr: project a job's ETTR from fault rates, detection, recovery and checkpointing."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import replace

from faultlens.history.whatif import provenance, sources
from faultlens.history.whatif.closed_form import (
    Infeasible,
    check_feasible,
    daly_interval,
    optimal_interval,
    project,
)
from faultlens.history.whatif.model import Scenario, timeout_only
from faultlens.history.whatif.monte_carlo import simulate
from faultlens.history.whatif.presets import PRESETS, SOURCE_COUNTS
from faultlens.history.whatif.sensitivity import sensitivity

# The Monte Carlo walks every fault of every run: above this many it shows a bar (a few seconds),
# above the budget it runs fewer timelines (and says so) rather than computing for minutes.
PROGRESS_FAULTS = 200_000
BUDGET_FAULTS = 4_000_000

log = logging.getLogger(__name__)

HELP = "project a job's ETTR (effective training time ratio) before it runs, and where the time goes"
DESCRIPTION = """\
Projects the ETTR (productive time / wall time, as ByteRobust defines it) of a training job of
--gpus GPUs for --days days, from per-class fault rates (per node-day: Meta's series model),
detection and localisation times, recovery by path (warm standby, requeue, restart in place, hot
update), spares (the warm standby pool's binomial P99 unless --spares) and checkpointing.

Inputs: a preset (--preset byterobust: ByteRobust's 9,600-GPU job; llama3: Llama 3's 16,384 H100s),
then a TOML file (--config), then this pipeline's measurements (--from-history DB: fault rates per
class; --from-score FILE: detection as `faultlens score --json` measured it), then flags.

Two engines: a closed form and a Monte-Carlo run of the timeline (--runs, --seed), which must agree.
Every input is marked published, measured or assumed; the assumed ones carry a range and the ETTR
is also given as a band over them (low, central, high). Measured diagnosis classes are mapped onto
the scenario's (docs/ettr.md), each with its sample count; rates that would keep the job down most of
the time are refused at once.
Prints the ETTR, the lost time by cause and phase (it adds up to 1 - ETTR), the optimal checkpoint
interval, the same job with the framework's timeout alone (no faultlens) and a sensitivity table;
--json prints one JSON object; --plot FILE draws the breakdown. docs/ettr.md has the model."""


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{'not an integer' if kind is int else 'not a number'}: {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _non_negative(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{'not an integer' if kind is int else 'not a number'}: {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", choices=sorted(PRESETS), default="byterobust",
                        help="published parameter set (default byterobust)")
    parser.add_argument("--config", metavar="FILE", help="TOML file of inputs (docs/ettr.md), over the preset")
    parser.add_argument("--gpus", type=_positive(int), help="GPUs of the job (default: the preset's)")
    parser.add_argument("--gpus-per-node", type=_positive(int), help="GPUs per machine (default 8)")
    parser.add_argument("--days", type=_positive(float), help="wall-clock length of the job (default: the preset's)")
    parser.add_argument("--checkpoint-interval", type=_positive(float), metavar="S",
                        help="seconds of training between checkpoints (default: the optimum)")
    parser.add_argument("--checkpoint-stall", type=_non_negative(float), metavar="S",
                        help="seconds a checkpoint stops training")
    parser.add_argument("--spares", type=_non_negative(int), help="warm standby machines (default: the pool's P99)")
    parser.add_argument("--from-score", metavar="FILE", help="`faultlens score --json` output: measured detection")
    parser.add_argument("--from-history", metavar="DB", help="fault history (DuckDB): measured fault rates")
    parser.add_argument("--history-detection-only", action="store_true",
                        help="take only detection from --from-history, keep the preset's (or --config's) rates")
    parser.add_argument("--runs", type=_positive(int), default=200, help="Monte-Carlo runs (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="Monte-Carlo seed (default 0)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    parser.add_argument("--plot", metavar="FILE", help="write the breakdown and interval curve (PNG, SVG, PDF)")


def build_scenario(args: argparse.Namespace) -> tuple[Scenario, dict]:
    """The scenario the flags describe, and a note of which sources filled it."""
    s = PRESETS[args.preset]()
    note: dict = {"preset": args.preset}
    if args.config:
        s = sources.from_toml(args.config, s)
        note["config"] = args.config
    if args.from_history:
        s, note["from_history"] = sources.apply_history(s, args.from_history,
                                                         rates=not args.history_detection_only)
    if args.from_score:
        s, note["from_score"] = sources.apply_score(s, sources.read_score(args.from_score))
    flags = {"gpus": args.gpus, "gpus_per_node": args.gpus_per_node, "days": args.days,
             "checkpoint_interval_s": args.checkpoint_interval, "checkpoint_stall_s": args.checkpoint_stall,
             "spares": args.spares}
    flags = {k: v for k, v in flags.items() if v is not None}
    s = replace(s, **flags)
    names = {"gpus": "--gpus", "gpus_per_node": "--gpus-per-node", "days": "--days", "spares": "--spares",
             "checkpoint_interval_s": "--checkpoint-interval", "checkpoint_stall_s": "--checkpoint-stall"}
    for key in flags:
        s = provenance.mark(s, key, provenance.Input(provenance.Kind.GIVEN, names[key]))
    if args.runs < 2:
        raise ValueError(f"--runs must be >= 2, got {args.runs}")
    s.validate()
    try:
        check_feasible(s)
    except Infeasible as exc:
        if note.get("from_history", {}).get("rates") != "history":
            raise
        raise Infeasible(f"{exc}; {_swamped_by_history(s, note['from_history'])}") from None
    return s, note


def _trains(s: Scenario, nodes: int) -> bool:
    try:
        check_feasible(replace(s, gpus=nodes * s.gpus_per_node))
    except Infeasible:
        return False
    return True


def _swamped_by_history(s: Scenario, history: dict) -> str:
    """What to do when a history's rates swamp the job (still one line): its own scale, the largest
    job they let train, or the preset's rates with the measured detection."""
    measured = history["measured"].values()
    own = max((m["nodes"] for m in measured), default=0)
    days = max((m["days"] for m in measured), default=0.0)
    keep = "or keep the preset's rates with the history's detection (--history-detection-only) or a score's (--from-score)"
    span = f"{days:.3g}"
    seen = f"{own:,} machine{'s' if own != 1 else ''} over {span} day{'s' if span != '1' else ''}"
    if own < 1 or not _trains(s, 1):
        return f"the history's rates ({seen}) keep even one machine down: a short or simulated history; {keep}"
    lo, hi = 1, s.nodes      # the largest job that trains, by bisection (more machines, more faults)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _trains(s, mid) else (lo, mid)
    at_own = f"the history's own scale (--gpus {own * s.gpus_per_node}), " if _trains(s, own) else ""
    return (f"with the history's rates ({seen}) a job trains up to --gpus {lo * s.gpus_per_node}: project at "
            f"{at_own}a job of at most that size, {keep}")


def _monte_carlo(s: Scenario, p, runs: int, seed: int, warnings: list[str]):
    per_run = max(p.faults_expected, 1.0)
    if per_run * runs > BUDGET_FAULTS:
        fewer = max(2, int(BUDGET_FAULTS // per_run))
        warnings.append(f"Monte Carlo: {runs} runs of {per_run:,.0f} faults each is too long; ran {fewer}")
        runs = fewer
    if per_run * runs <= PROGRESS_FAULTS or not sys.stderr.isatty():
        return simulate(s, runs=runs, seed=seed, interval_s=p.checkpoint_interval_s)
    from tqdm import tqdm

    with tqdm(total=runs, desc="Monte Carlo", unit="run", file=sys.stderr) as bar:
        return simulate(s, runs=runs, seed=seed, interval_s=p.checkpoint_interval_s, progress=bar.update)


def _result(s: Scenario, note: dict, runs: int, seed: int) -> dict:
    p = project(s)
    warnings = [w for src in note.values() if isinstance(src, dict) for w in src.get("warnings", [])]
    mc = _monte_carlo(s, p, runs, seed, warnings)
    base = timeout_only(s)
    bp = project(base)
    lam = s.fault_rate_s()
    band = provenance.band(s)
    preset = note.get("preset")
    counted = SOURCE_COUNTS.get(preset) if isinstance(preset, str) else None
    source_count = None
    if counted and (s.gpus, s.days) == counted[:2] and set(note) == {"preset"}:
        source_count = {"count": counted[2], "what": counted[3]}
    return {
        "ettr": p.ettr,
        "ettr_band": band.to_dict(),
        "warnings": warnings,
        "faults_source_count": source_count,
        "ettr_monte_carlo": mc.ettr,
        "ettr_ci": list(mc.ci),
        "ettr_1h": mc.window_ettr,
        "breakdown": p.breakdown,
        "checkpoint_interval_optimal_s": optimal_interval(s),
        "checkpoint_interval_s": p.checkpoint_interval_s,
        "checkpoint_interval_daly_s": daly_interval(s.checkpoint_stall_s, 1 / lam) if lam else None,
        "faults_expected": p.faults_expected,
        "faults_monte_carlo": mc.faults_mean,
        "spares": p.spares,
        "spare_short_probability": p.spare_short_probability,
        "requeues_monte_carlo": mc.requeues_mean,
        "timeout_only": {"ettr": bp.ettr, "breakdown": bp.breakdown,
                         "checkpoint_interval_s": bp.checkpoint_interval_s},
        "sensitivity": [{"change": c.what, "ettr": c.ettr, "points": c.points} for c in sensitivity(s)],
        "inputs": {**s.to_dict(), "sources": note, "monte_carlo_runs": mc.runs, "seed": seed,
                   "marked": provenance.inputs(s)},
    }


def run(args: argparse.Namespace) -> int:
    try:
        s, note = build_scenario(args)
        out = _result(s, note, args.runs, args.seed)
        if args.plot:
            from faultlens.history.whatif.plot import plot_projection

            plot_projection(s, project(s), args.plot, band=out["ettr_band"])
            log.info("plot written to %s", args.plot)
    except (ValueError, OSError) as exc:
        print(f"faultlens ettr: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out), flush=True)
    else:
        print_tables(s, out)
    return 0


def print_tables(s: Scenario, out: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=None if sys.stdout.isatty() else 130)
    hours = s.duration_s / 3600.0
    lo, hi = out["ettr_ci"]
    band = out["ettr_band"]
    counted = out.get("faults_source_count")
    beside = f" ({counted['count']} {counted['what']})" if counted else ""
    console.print(
        f"[b]{s.name}[/b]: {s.gpus:,} GPUs ({s.nodes:,} machines), {s.days:g} days, "
        f"{out['faults_expected']:.0f} faults expected{beside}, {out['spares']} spares, checkpoint every "
        f"{out['checkpoint_interval_s']:.0f} s (optimum {out['checkpoint_interval_optimal_s']:.0f} s)\n"
        f"ETTR {out['ettr']:.2%} (closed form), {out['ettr_monte_carlo']:.2%} "
        f"[{lo:.2%}, {hi:.2%}] (Monte Carlo, {out['inputs']['monte_carlo_runs']} runs); "
        f"framework timeout alone: {out['timeout_only']['ettr']:.2%}\n"
        f"over the assumed inputs' ranges: {band['low']:.2%} (low) {band['central']:.2%} (central) "
        f"{band['high']:.2%} (high)")
    for w in out.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {w}")
    w = out["ettr_1h"]
    if w:
        console.print(f"1-hour windows (ByteRobust's other view): median {w['p50']:.2%}, 5th percentile "
                      f"{w['p5']:.2%}, {w['below_90']:.1%} of hours below 90 %")
    t = Table(title="lost time (% of wall time; hours)")
    t.add_column("cause")
    phases = ["detection", "localisation", "recovery", "over_eviction", "lost_work", "stall"]
    for ph in phases + ["total"]:
        t.add_column(ph.replace("_", " "), justify="right")
    rows = sorted(out["breakdown"].items(), key=lambda kv: -sum(kv[1].values()))
    for cause, ph in rows:
        total = sum(ph.values())
        if total <= 0:
            continue
        t.add_row(cause, *[f"{100 * ph[p]:.3f}" if ph.get(p) else "-" for p in phases],
                  f"{100 * total:.3f} ({total * hours:.1f} h)")
    console.print(t)
    st = Table(title="what is worth fixing (closed form, one change at a time)")
    st.add_column("change")
    st.add_column("ETTR", justify="right")
    st.add_column("points", justify="right")
    for row in out["sensitivity"][:12]:
        st.add_row(row["change"], f"{row['ettr']:.2%}", f"{row['points']:+.2f}")
    console.print(st)
    for source in ("from_history", "from_score"):
        note = out["inputs"]["sources"].get(source)
        if not note or not note.get("measured"):
            continue
        mt = Table(title=f"measured ({source.replace('_', '-')}): diagnosis classes onto the scenario's")
        for col in ("class", "from", "samples", "detection p50 s", "rate / node-day"):
            mt.add_column(col, justify="left" if col in ("class", "from") else "right")
        for name, m in sorted(note["measured"].items()):
            p50 = m.get("detection_latency_p50_s", m.get("detection_p50_s"))
            rate = m.get("rate_per_node_day")
            mt.add_row(name, ", ".join(m["from"]), str(m["samples"]), "-" if p50 is None else f"{p50:.1f}",
                       "-" if rate is None else f"{rate:.4g}")
        console.print(mt)
    bt = Table(title="the guesses that move it most (ETTR points between each input's ends)")
    bt.add_column("input")
    bt.add_column("kind")
    bt.add_column("value", justify="right")
    bt.add_column("range", justify="right")
    bt.add_column("points", justify="right")
    marked = out["inputs"]["marked"]
    for key, points in list(band["swing"].items())[:10]:
        m = marked.get(key, {})
        rng = m.get("range") or ["-", "-"]
        bt.add_row(key, m.get("kind", ""), f"{m.get('value', 0):g}", f"{rng[0]:g}-{rng[1]:g}", f"{points:.2f}")
    console.print(bt)
