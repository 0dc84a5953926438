"""The projection as one figure: where the lost time goes, and ETTR against the checkpoint interval."""

from __future__ import annotations

import math
from pathlib import Path

from faultlens.history.whatif.closed_form import Projection, project
from faultlens.history.whatif.model import PHASES, Scenario, timeout_only


def plot_projection(s: Scenario, p: Projection, out: str | Path, band: dict | None = None) -> Path:
    """``band``: the ETTR over the assumed inputs' ranges (provenance.Band.to_dict), drawn as a span."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    hours = s.duration_s / 3600.0
    causes = sorted((c for c in p.breakdown if c != "checkpoint"), key=lambda c: sum(p.breakdown[c].values()))
    causes.append("checkpoint")
    left = [0.0] * len(causes)
    for phase in PHASES + ("stall",):
        widths = [p.breakdown[c].get(phase, 0.0) * hours for c in causes]
        if any(widths):
            ax1.barh(causes, widths, left=left, label=phase)
            left = [a + b for a, b in zip(left, widths, strict=True)]
    ax1.set_xlabel("hours of the job lost")
    title = f"{s.name}: {s.gpus:,} GPUs, {s.days:g} days, ETTR {p.ettr:.1%}"
    if band:
        title += f" [{band['low']:.1%}, {band['high']:.1%}] over assumed inputs"
    ax1.set_title(title, fontsize=10)
    ax1.legend(fontsize=8)

    best = p.checkpoint_interval_s
    grid = [best * math.exp(x / 10) for x in range(-25, 26)]
    grid = [t for t in grid if t <= s.duration_s]
    ax2.plot(grid, [100 * project(s, t).ettr for t in grid], label="faultlens as measured")
    base = timeout_only(s)
    ax2.plot(grid, [100 * project(base, t).ettr for t in grid], label="framework timeout alone")
    ax2.axvline(best, color="grey", linestyle=":", label=f"optimum {best:.0f} s")
    if band:
        ax2.axhspan(100 * band["low"], 100 * band["high"], color="tab:blue", alpha=0.12,
                    label="band over assumed inputs")
    ax2.set_xscale("log")
    ax2.set_xlabel("checkpoint interval (s)")
    ax2.set_ylabel("ETTR (%)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out)
    plt.close(fig)
    return out

