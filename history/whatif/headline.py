"""One projection in a few numbers: what the demo prints and the HTML report shows.

The scenario is ByteRobust's preset sized to the job asked for, with detection replaced by what a
`score` of this pipeline measured (sources.apply_score), next to the same job with the framework's
timeout alone.
"""

from __future__ import annotations

from typing import Any, Mapping

from faultlens.history.whatif import presets, sources
from faultlens.history.whatif.closed_form import project
from faultlens.history.whatif.model import Scenario, timeout_only
from faultlens.history.whatif.monte_carlo import simulate
from faultlens.history.whatif.provenance import Kind

DEMO_GPUS = 9600
DEMO_DAYS = 90.0


def headline(score_rows: Mapping[str, Mapping[str, Any]], *, gpus: int = DEMO_GPUS, days: float = DEMO_DAYS,
             runs: int = 60, seed: int = 0, top: int = 3) -> dict[str, Any]:
    """``score_rows``: fault class -> a `faultlens score --json` class line (ClassScore.to_dict)."""
    s = presets.byterobust(gpus=gpus, days=days)
    s, note = sources.apply_score(s, {k: dict(v) for k, v in score_rows.items()},
                                  asked_as=f"projected ETTR ({gpus:,} GPUs, {days:g} days, with this detection)")
    p = project(s)
    mc = simulate(s, runs=runs, seed=seed, interval_s=p.checkpoint_interval_s)
    causes = sorted(((cause, phase, share) for cause, phases in p.breakdown.items()
                     for phase, share in phases.items() if share > 0), key=lambda c: -c[2])
    return {
        "gpus": gpus, "days": days, "ettr": p.ettr, "ettr_monte_carlo": mc.ettr, "ettr_ci": list(mc.ci),
        "timeout_only_ettr": project(timeout_only(s)).ettr,
        "checkpoint_interval_optimal_s": p.checkpoint_interval_s,
        "largest_losses": [{"cause": f"{cause} {phase}".replace("_", " "), "share": share,
                            **loss_source(s, cause, phase)} for cause, phase, share in causes[:top]],
        "measured_classes": sorted(note["measured"]),
    }


# The input a phase's seconds come from; a share is that times the class's rate (the preset's: a
# score measures detection, not how often faults come). Recovery and lost work rest on the preset's
# recovery paths and checkpointing, which no run of this pipeline measures.
_PHASE_INPUT = {"detection": "detect_s", "localisation": "localise_s", "over_eviction": "over_evict"}


def loss_source(s: Scenario, cause: str, phase: str) -> dict[str, Any]:
    """Where one loss's seconds come from, as the projection marked them (provenance.py):
    ``{"source": "measured", "samples": n}`` with ``"guess": True`` under sources.MIN_SAMPLES, or
    ``{"source": "preset", "kind": "published" | "assumed"}`` (no kind where several inputs mix)."""
    key = _PHASE_INPUT.get(phase)
    inp = s.provenance.get(f"faults.{cause}.{key}") if key else None
    if inp is not None and inp.kind == Kind.MEASURED:
        n = inp.samples or 0
        return {"source": "measured", "samples": n, "guess": n < sources.MIN_SAMPLES}
    if inp is not None:
        return {"source": "preset", "kind": str(inp.kind)}
    if key:     # nobody marked it: the model's default (provenance.inputs reports it as assumed)
        return {"source": "preset", "kind": str(Kind.ASSUMED)}
    return {"source": "preset"}


def loss_source_words(loss: Mapping[str, Any]) -> str:
    """:func:`loss_source` in words, as the demo and the HTML report say it: this run's measurement
    (and how thin it is) or the preset, in the words of the what-if's own warning."""
    if loss.get("source") == "measured":
        n = loss.get("samples", 0)
        thin = ": treat it as a guess" if loss.get("guess") else ""
        return f"this run, {n} sample{'s' if n != 1 else ''}{thin}"
    if loss.get("source") == "preset":
        kind = str(loss.get("kind", ""))
        return {"published": "the preset (published)", "assumed": "the preset (assumed: a guess)"}.get(kind, "the preset")
    return ""


def history_rows(conn) -> dict[str, dict[str, Any]]:
    """A history's acting diagnoses as score lines: per class, the p50 of onset → decision. A
    history knows what it found, not what it missed, so recall is taken as 1 (docs/ettr.md)."""
    from faultlens.history.queries import run

    return {r["fault"]: {"fault": r["fault"], "labels": r["n"], "detected": r["n"], "recall": 1.0,
                         "detection_latency_p50_s": r["p50_s"], "wrong_nodes": 0}
            for r in run(conn, "detection_by_class") if r["n"] and r["p50_s"] is not None}
