"""Charts of a fault history (matplotlib): the report's PNGs and the notebooks' figures.

Every function takes an open history and returns a ``matplotlib.figure.Figure``, or ``None``
when the history holds nothing to draw. Figures are built without pyplot, so no global state
or GUI backend is involved (the report runs headless; a notebook just displays the figure).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Callable

import duckdb
from matplotlib.figure import Figure

from history.queries import columns, run

STATE_COLOURS = {"running": "#2ca02c", "stalled": "#ff7f0e", "down": "#d62728", "restarting": "#1f77b4"}


def _when(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)


def faults_over_time(conn: duckdb.DuckDBPyConnection, buckets: int = 40) -> Figure | None:
    rows = run(conn, "faults_over_time", buckets=buckets)
    if not rows:
        return None
    starts = sorted({r["bucket_start"] for r in rows})
    faults = sorted({r["fault"] for r in rows})
    counts = {(r["bucket_start"], r["fault"]): r["diagnoses"] for r in rows}
    width = rows[0]["width"]
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.subplots()
    bottom = [0] * len(starts)
    x = [_when(s) for s in starts]
    for fault in faults:
        heights = [counts.get((s, fault), 0) for s in starts]
        ax.bar(x, heights, width=dt.timedelta(seconds=width * 0.9), bottom=bottom, label=fault, align="edge")
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_title("Diagnosed faults by class over time (by onset, UTC)")
    ax.set_ylabel("diagnoses")
    ax.legend(fontsize="small", ncols=2)
    fig.autofmt_xdate()
    return fig


def node_class_heatmap(conn: duckdb.DuckDBPyConnection, max_nodes: int = 40) -> Figure | None:
    rows = run(conn, "faults_by_node")
    if not rows:
        return None
    totals: dict[str, int] = {}
    for r in rows:
        totals[r["node"]] = totals.get(r["node"], 0) + r["diagnoses"]
    nodes = sorted(totals, key=lambda n: (-totals[n], n))[:max_nodes]
    faults = sorted({r["fault"] for r in rows})
    grid = [[0] * len(faults) for _ in nodes]
    index = {n: i for i, n in enumerate(nodes)}
    for r in rows:
        if r["node"] in index:
            grid[index[r["node"]]][faults.index(r["fault"])] = r["diagnoses"]
    fig = Figure(figsize=(max(5, 0.7 * len(faults) + 3), max(3, 0.3 * len(nodes) + 1.5)), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(grid, aspect="auto", cmap="Reds")
    ax.set_xticks(range(len(faults)), faults, rotation=45, ha="right")
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_title(f"Diagnoses per node and fault class (top {len(nodes)} nodes)")
    fig.colorbar(im, ax=ax, label="diagnoses")
    return fig


def latency_histogram(conn: duckdb.DuckDBPyConnection) -> Figure | None:
    (latencies,) = columns(run(conn, "detection_latencies"), "latency_s")
    if not latencies:
        return None
    stats = run(conn, "detection_latency")[0]
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    ax.hist(latencies, bins=min(30, max(5, len(latencies))), color="#1f77b4")
    for label, value, style in (("p50", stats["p50_s"], "--"), ("p99", stats["p99_s"], ":")):
        ax.axvline(value, color="k", linestyle=style, label=f"{label} {value:.1f} s")
    ax.set_xlabel("detection latency: fault onset → diagnosis (s)")
    ax.set_ylabel("diagnoses")
    ax.set_title(f"Detection latency ({stats['n']} diagnoses)")
    ax.legend()
    return fig


def job_timeline(conn: duckdb.DuckDBPyConnection, max_jobs: int = 12) -> Figure | None:
    """One bar per job, in seconds since the job's first mark (jobs far apart in time stay legible)."""
    marks = run(conn, "timeline_spans")
    if not marks:
        return None
    jobs = set(sorted({m["job"] for m in marks})[:max_jobs])
    start: dict[str, float] = {}
    for m in marks:  # spans come ordered by job, ts: the first of each job is its start
        if m["job"] in jobs and m["job"] not in start:
            start[m["job"]] = m["ts"]
    incidents = [i for i in run(conn, "incidents") if i["job"] in start]
    fig = Figure(figsize=(11, 1.2 + 0.7 * len(jobs)), layout="constrained")
    ax = fig.subplots()
    seen: set[str] = set()

    def label(name: str) -> str | None:
        if name in seen:
            return None
        seen.add(name)
        return name

    spans_of: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for m in marks:
        if m["job"] in start and m["next_ts"] > m["ts"]:
            spans_of.setdefault((m["job"], m["state"]), []).append((m["ts"] - start[m["job"]], m["next_ts"] - m["ts"]))
    for y, job in enumerate(sorted(jobs)):
        t0 = start[job]
        for state, colour in STATE_COLOURS.items():
            spans = spans_of.get((job, state))
            if spans:
                ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colour, label=label(state))
        mine = [i for i in incidents if i["job"] == job]
        if mine:
            ax.scatter([i["onset"] - t0 for i in mine], [y] * len(mine), marker="v", color="k", zorder=3,
                       label=label("fault onset"))
            ax.scatter([i["detected_at"] - t0 for i in mine], [y + 0.4] * len(mine), marker="x", color="purple",
                       zorder=3, label=label("diagnosis"))
    ax.set_yticks(range(len(jobs)), [f"{j}\n{_when(start[j]):%Y-%m-%d %H:%M}" for j in sorted(jobs)])
    ax.set_xlabel("seconds since the job's first record")
    ax.set_title("Job timelines: state and incidents")
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def mtbf_bars(conn: duckdb.DuckDBPyConnection, limit: int = 20) -> Figure | None:
    rows = run(conn, "mtbf")[:limit]
    if not rows:
        return None
    nodes, mtbf = columns(rows, "node", "mtbf_s")
    fig = Figure(figsize=(8, max(3, 0.3 * len(nodes) + 1.5)), layout="constrained")
    ax = fig.subplots()
    ax.barh(nodes[::-1], [m / 3600 for m in mtbf][::-1], color="#9467bd")
    ax.set_xlabel("MTBF (hours)")
    ax.set_title(f"Least reliable nodes: MTBF over the history window ({len(nodes)} shown)")
    return fig


PLOTS: dict[str, Callable[[duckdb.DuckDBPyConnection], Figure | None]] = {
    "faults_over_time": faults_over_time,
    "node_class_heatmap": node_class_heatmap,
    "detection_latency": latency_histogram,
    "job_timeline": job_timeline,
    "mtbf": mtbf_bars,
}


def write_plots(conn: duckdb.DuckDBPyConnection, outdir: str | Path) -> dict[str, Path | None]:
    """Save each chart as ``DIR/<name>.png``; a chart with no data maps to None (and no file)."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path | None] = {}
    for name, make in PLOTS.items():
        fig = make(conn)
        if fig is None:
            written[name] = None
            continue
        path = out / f"{name}.png"
        fig.savefig(path, dpi=100)
        written[name] = path
    return written
