"""One projection in a few numbers: what the demo prints and the HTML report shows.

The scenario is ByteRobust's preset sized to the job asked for, with detection replaced by what a
`score` of this pipeline measured (sources.apply_score), next to the same job with the framework's
timeout alone.
"""

from __future__ import annotations

from typing import Any, Mapping

from faultlens.history.whatif import presets, sources
from faultlens.history.whatif.closed_form import project
from faultlens.history.whatif.model import timeout_only
from faultlens.history.whatif.monte_carlo import simulate

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
    causes = sorted(((f"{cause} {phase}".replace("_", " "), share) for cause, phases in p.breakdown.items()
                     for phase, share in phases.items() if share > 0), key=lambda kv: -kv[1])
    return {
        "gpus": gpus, "days": days, "ettr": p.ettr, "ettr_monte_carlo": mc.ettr, "ettr_ci": list(mc.ci),
        "timeout_only_ettr": project(timeout_only(s)).ettr,
        "checkpoint_interval_optimal_s": p.checkpoint_interval_s,
        "largest_losses": [{"cause": c, "share": v} for c, v in causes[:top]],
        "measured_classes": sorted(note["measured"]),
    }


def history_rows(conn) -> dict[str, dict[str, Any]]:
    """A history's acting diagnoses as score lines: per class, the p50 of onset → decision. A
    history knows what it found, not what it missed, so recall is taken as 1 (docs/ettr.md)."""
    from faultlens.history.queries import run

    return {r["fault"]: {"fault": r["fault"], "labels": r["n"], "detected": r["n"], "recall": 1.0,
                         "detection_latency_p50_s": r["p50_s"], "wrong_nodes": 0}
            for r in run(conn, "detection_by_class") if r["n"] and r["p50_s"] is not None}
