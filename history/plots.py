"""Charts of a fault history (matplotlib over pandas DataFrames): the report's PNGs, the HTML
report's figures and the notebooks' figures.

Every function takes an open history and returns a ``matplotlib.figure.Figure``, or ``None`` when
the history holds nothing to draw. Figures are built without pyplot, so no global state or GUI
backend is involved (the report runs headless; a notebook just displays the figure).

What is counted: acting diagnoses only (``history.query_parts.KINDS``). A stack request names every
node of the job once per round, so counting it would draw every machine as failing; requests are
drawn apart (their own panel) or not at all, and record-only findings are never drawn. Each
figure has a title, axis units and a caption line that says what it counts and what it leaves out.
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Callable

import duckdb
import matplotlib
import matplotlib.dates as mdates
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from faultlens.events.diagnosis_record import FAULT_CLASSES
from faultlens.history.queries import frame, kind_counts, run

STATE_COLOURS = {"running": "#2ca02c", "stalled": "#ff7f0e", "down": "#d62728", "restarting": "#1f77b4",
                 "ended": "#d9d9d9"}
REQUEST_COLOUR = "#7f7f7f"
_TAB20 = matplotlib.colormaps["tab20"]
# One colour per class in every chart (tab20 holds 20, the catalogue 18): a class keeps its colour
# from one figure to the next instead of cycling through ten.
CLASS_COLOURS = {fault: _TAB20(i % 20) for i, fault in enumerate(FAULT_CLASSES)}


def _when(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)


def _class_order(faults) -> list[str]:
    rank = {f: i for i, f in enumerate(FAULT_CLASSES)}
    return sorted(set(faults), key=lambda f: (rank.get(f, len(rank)), f))


def duration_unit(seconds: float) -> tuple[float, str]:
    """(divisor, unit) that writes ``seconds`` with a legible number: s, min, h or days."""
    for divisor, unit in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if seconds >= 2 * divisor:
            return divisor, unit
    return 1.0, "s"


def _duration(seconds: float) -> str:
    divisor, unit = duration_unit(seconds)
    return f"{seconds / divisor:.3g} {unit}"


def _left_out(kinds: dict[str, int], *, requests_drawn: bool = False) -> str:
    parts = []
    if kinds.get("evidence_request") and not requests_drawn:
        parts.append(f"{kinds['evidence_request']} stack request(s) (capture_stacks: a suspicion that names every node)")
    if kinds.get("record_only"):
        parts.append(f"{kinds['record_only']} record-only finding(s) (action none)")
    return f" Not counted: {'; '.join(parts)}." if parts else ""


def _caption(fig: Figure, text: str) -> None:
    # supxlabel takes part in the constrained layout, so the caption never overlaps the axes.
    fig.supxlabel(text, x=0.01, ha="left", fontsize="small", color="#444444", wrap=True)


def faults_over_time(conn: duckdb.DuckDBPyConnection, buckets: int = 40) -> Figure | None:
    df = frame(conn, "faults_over_time", buckets=buckets)
    if df.empty or not (df["acting"].sum() or df["evidence_requests"].sum()):
        return None
    width = float(df["width"].iloc[0])
    acting = df.pivot_table(index="bucket_start", columns="fault", values="acting", aggfunc="sum", fill_value=0)
    acting = acting[[f for f in _class_order(acting.columns) if acting[f].sum() > 0]]
    requests = df.groupby("bucket_start")["evidence_requests"].sum()
    kinds = kind_counts(conn)
    show_requests = bool(requests.sum())
    fig = Figure(figsize=(10, 5.2 if show_requests else 4.5), layout="constrained")
    if show_requests:
        ax, rax = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1.3))
    else:
        ax, rax = fig.subplots(), None
    bar_width = dt.timedelta(seconds=width * 0.9)
    x = [_when(s) for s in acting.index]
    bottom = [0] * len(x)
    for fault in acting.columns:
        heights = acting[fault].tolist()
        ax.bar(x, heights, width=bar_width, bottom=bottom, label=fault, align="edge", color=CLASS_COLOURS.get(fault))
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_title("Acting diagnoses by fault class over time")
    ax.set_ylabel(f"acting diagnoses\nper {_duration(width)}")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if len(acting.columns):
        ax.legend(fontsize="small", ncols=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if rax is not None:
        rax.bar([_when(s) for s in requests.index], requests.tolist(), width=bar_width, align="edge",
                color=REQUEST_COLOUR, label="stack requests")
        rax.set_ylabel("stack requests\nper bucket", fontsize="small")
        rax.yaxis.set_major_locator(MaxNLocator(integer=True))
        rax.set_xlabel("fault onset (UTC)")
    else:
        ax.set_xlabel("fault onset (UTC)")
    span = float(acting.index.max() - acting.index.min()) if len(acting.index) else 0.0
    (rax or ax).xaxis.set_major_formatter(mdates.DateFormatter("%H:%M" if span < 86400 else "%m-%d %H:%M", tz=dt.timezone.utc))
    for label in (rax or ax).get_xticklabels():
        label.set_rotation(30)
        label.set_ha("right")
    drawn = " Lower panel, drawn apart: stack requests (capture_stacks), which blame nobody." if show_requests else ""
    _caption(fig, f"Counted: {kinds['acting']} acting diagnoses (evict, restart, reattempt, rollback, stop-time "
                  f"diagnosis, inspection) by the time of their first evidence, in buckets of {_duration(width)}."
                  f"{drawn}{_left_out(kinds, requests_drawn=show_requests)}")
    return fig


def node_class_heatmap(conn: duckdb.DuckDBPyConnection, max_nodes: int = 40) -> Figure | None:
    df = frame(conn, "faults_by_node")
    df = df[df["acting"] > 0]
    if df.empty:
        return None
    grid = df.pivot_table(index="node", columns="fault", values="acting", aggfunc="sum", fill_value=0)
    totals = grid.sum(axis=1)
    nodes = sorted(grid.index, key=lambda n: (-totals[n], n))[:max_nodes]
    grid = grid.loc[nodes, _class_order(grid.columns)]
    kinds = kind_counts(conn)
    fig = Figure(figsize=(max(6, 0.7 * grid.shape[1] + 3.5), max(3.4, 0.3 * len(nodes) + 2.2)), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(grid.to_numpy(), aspect="auto", cmap="Reds", vmin=0, vmax=max(1, int(grid.to_numpy().max())))
    for (i, j), value in pd.DataFrame(grid.to_numpy()).stack().items():
        if value:
            ax.text(j, i, str(int(value)), ha="center", va="center", fontsize="small",
                    color="white" if value > grid.to_numpy().max() / 2 else "black")
    ax.set_xticks(range(grid.shape[1]), grid.columns, rotation=45, ha="right")
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_xlabel("fault class")
    ax.set_ylabel("node")
    shown = f"top {len(nodes)} of {len(totals)} nodes" if len(totals) > len(nodes) else f"{len(nodes)} nodes"
    ax.set_title(f"Acting diagnoses per node and fault class ({shown})")
    bar = fig.colorbar(im, ax=ax, label="acting diagnoses naming the node")
    bar.locator = MaxNLocator(integer=True)
    bar.update_ticks()
    _caption(fig, "Counted: acting diagnoses, once for each node they name (a group eviction names every node "
                  f"of the group).{_left_out(kinds)}")
    return fig


def latency_histogram(conn: duckdb.DuckDBPyConnection) -> Figure | None:
    df = frame(conn, "detection_latencies")
    if df.empty:
        return None
    stats = run(conn, "detection_latency")[0]
    kinds = kind_counts(conn)
    fig = Figure(figsize=(8, 4.4), layout="constrained")
    ax = fig.subplots()
    ax.hist(df["latency_s"], bins=min(30, max(5, len(df))), color="#1f77b4")
    for label, value, style in (("p50", stats["p50_s"], "--"), ("p99", stats["p99_s"], ":")):
        ax.axvline(value, color="k", linestyle=style, label=f"{label} {value:.1f} s")
    ax.set_xlabel("detection latency: first evidence → diagnosis (s)")
    ax.set_ylabel("acting diagnoses")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"Detection latency ({stats['n']} acting diagnoses)")
    ax.legend()
    _caption(fig, "Counted: acting diagnoses; latency = decision time minus the time of the first evidence (a hang "
                  f"or a fail-slow verdict waits for its stack rounds).{_left_out(kinds)}")
    return fig


def job_timeline(conn: duckdb.DuckDBPyConnection, max_jobs: int = 12) -> Figure | None:
    """One bar per job, in seconds since the job's first mark (jobs far apart in time stay legible)."""
    marks = frame(conn, "timeline_spans")
    if marks.empty:
        return None
    jobs = sorted(marks["job"].unique())[:max_jobs]
    marks = marks[marks["job"].isin(jobs)]
    start = marks.groupby("job")["ts"].min()
    incidents = frame(conn, "incidents")
    incidents = incidents[incidents["job"].isin(jobs)]
    kinds = kind_counts(conn)
    fig = Figure(figsize=(11, 2.4 + 0.7 * len(jobs)), layout="constrained")
    ax = fig.subplots()
    seen: set[str] = set()

    def label(name: str) -> str | None:
        if name in seen:
            return None
        seen.add(name)
        return name

    spans = marks[marks["next_ts"] > marks["ts"]]
    for y, job in enumerate(jobs):
        t0 = start[job]
        mine = spans[spans["job"] == job]
        for state, colour in STATE_COLOURS.items():
            s = mine[mine["state"] == state]
            if not s.empty:
                ax.broken_barh(list(zip(s["ts"] - t0, s["next_ts"] - s["ts"], strict=True)), (y - 0.35, 0.7), facecolors=colour,
                               label=label(state))
        inc = incidents[incidents["job"] == job]
        if not inc.empty:
            ax.scatter(inc["onset"] - t0, [y] * len(inc), marker="v", color="k", zorder=3, label=label("fault onset"))
            ax.scatter(inc["detected_at"] - t0, [y + 0.4] * len(inc), marker="x", color="purple", zorder=3,
                       label=label("diagnosis"))
    ax.set_yticks(range(len(jobs)), [f"{j}\n{_when(start[j]):%Y-%m-%d %H:%M} UTC" for j in jobs])
    ax.set_xlabel("seconds since the job's first record (s)")
    ax.set_title("Job timelines: state and incidents")
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _caption(fig, "Bars: the job's state from the history's timeline marks (running = train steps seen; ended = "
                  "the launcher said the job ended). Markers: "
                  f"the {len(incidents)} incident(s), acting diagnoses only (▼ first evidence, × decision)."
                  f"{_left_out(kinds)}")
    return fig


def mtbf_bars(conn: duckdb.DuckDBPyConnection, limit: int = 20) -> Figure | None:
    df = frame(conn, "mtbf").head(limit)
    if df.empty:
        return None
    divisor, unit = duration_unit(float(df["mtbf_s"].max()))
    kinds = kind_counts(conn)
    fig = Figure(figsize=(8, max(3.4, 0.3 * len(df) + 2.0)), layout="constrained")
    ax = fig.subplots()
    ax.barh(df["node"][::-1], (df["mtbf_s"] / divisor)[::-1], color="#9467bd")
    ax.set_xlabel(f"MTBF ({unit})")
    ax.set_ylabel("node")
    ax.set_title(f"Least reliable nodes: MTBF over the history window ({len(df)} shown)")
    _caption(fig, f"MTBF = history window ({_duration(float(df['window_s'].iloc[0]))}) / failures; a failure is an "
                  f"acting diagnosis naming the node. Nodes that never failed are not shown.{_left_out(kinds)}")
    return fig


def mttr_bars(conn: duckdb.DuckDBPyConnection) -> Figure | None:
    df = frame(conn, "mttr_by_class").dropna(subset=["mttr_s"])
    if df.empty:
        return None
    df = df.iloc[::-1]
    divisor, unit = duration_unit(float(df["mttr_s"].max()))
    fig = Figure(figsize=(8, max(3.4, 0.3 * len(df) + 2.0)), layout="constrained")
    ax = fig.subplots()
    ax.barh(df["fault"], df["mttr_s"] / divisor, color="#6baed6", label="MTTR (mean)")
    ax.scatter(df["detection_p50_s"] / divisor, df["fault"], marker="|", s=200, color="k", zorder=3,
               label="detection (p50)")
    ax.set_xlabel(f"time from fault onset ({unit})")
    ax.set_title("Time to recover by fault class (MTTR)")
    ax.legend(fontsize="small", loc="lower right")
    unrecovered = int((frame(conn, "mttr_by_class").eval("incidents - recovered")).sum())
    tail = f" {unrecovered} incident(s) with no recovery in the history are left out." if unrecovered else ""
    _caption(fig, "Counted: incidents (acting diagnoses); recovery = first train step after the first command "
                  f"(or after the diagnosis), measured from the fault's first evidence.{tail}")
    return fig


PLOTS: dict[str, Callable[[duckdb.DuckDBPyConnection], Figure | None]] = {
    "faults_over_time": faults_over_time,
    "node_class_heatmap": node_class_heatmap,
    "detection_latency": latency_histogram,
    "job_timeline": job_timeline,
    "mtbf": mtbf_bars,
    "mttr": mttr_bars,
}


def png_bytes(fig: Figure, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def render_pngs(conn: duckdb.DuckDBPyConnection) -> dict[str, bytes | None]:
    """Every chart drawn once, as PNG bytes (None: no data to draw): the files and the HTML report
    both take them from here, so a run that writes both draws each chart once."""
    return {name: None if (fig := make(conn)) is None else png_bytes(fig) for name, make in PLOTS.items()}


def write_plots(conn: duckdb.DuckDBPyConnection, outdir: str | Path,
                pngs: dict[str, bytes | None] | None = None) -> dict[str, Path | None]:
    """Save each chart as ``DIR/<name>.png`` (from ``pngs`` when they were drawn already, see
    :func:`render_pngs`); a chart with no data maps to None (and no file)."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path | None] = {}
    for name, png in (pngs if pngs is not None else render_pngs(conn)).items():
        if png is None:
            written[name] = None
            continue
        path = out / f"{name}.png"
        path.write_bytes(png)
        written[name] = path
    return written
