"""The charts count acting diagnoses only, draw stack requests apart, and say so in a caption."""

from __future__ import annotations

import pytest

from faultlens.history.schema import memory_history
from faultlens.history.sink import HistorySink, build_batch
from tests.history import requests


@pytest.fixture(scope="module")
def plots():
    """faultlens.history.plots, imported by the worker that runs these tests (it imports matplotlib and
    pandas, ~1 CPU-s), not by every xdist worker that collects the file."""
    from faultlens.history import plots

    return plots


def _caption(fig) -> str:
    return fig._supxlabel.get_text() if fig._supxlabel is not None else ""


def test_heatmap_counts_acting_diagnoses_only(plots, conn):
    fig = plots.node_class_heatmap(conn)
    ax = fig.axes[0]
    nodes = [t.get_text() for t in ax.get_yticklabels()]
    classes = [t.get_text() for t in ax.get_xticklabels()]
    grid = ax.images[0].get_array().tolist()
    cells = {(n, c): grid[i][j] for i, n in enumerate(nodes) for j, c in enumerate(classes) if grid[i][j]}
    # the two stack requests name all four nodes and the record-only findings n0 and n2: none is drawn
    assert cells == {("n1", "gpu_lost"): 1, ("n1", "gpu_thermal"): 1, ("n2", "nccl_error"): 1,
                     ("n3", "nccl_error"): 1}
    assert "job_hang" not in classes and "n0" not in nodes
    assert "Not counted: 2 stack request(s)" in _caption(fig) and "2 record-only finding(s)" in _caption(fig)


def test_faults_over_time_draws_requests_in_their_own_panel(plots, conn):
    fig = plots.faults_over_time(conn)
    top, bottom = fig.axes[:2]
    acting = sum(p.get_height() for p in top.patches)
    requests_drawn = sum(p.get_height() for p in bottom.patches)
    assert (acting, requests_drawn) == (3, 2)  # d1, d2, d4 above; r1, r2 below
    assert {t.get_text() for t in top.get_legend().get_texts()} == {"gpu_lost", "nccl_error", "gpu_thermal"}
    assert "Counted: 3 acting diagnoses" in _caption(fig) and "stack requests" in bottom.get_ylabel().replace("\n", " ")


def test_every_chart_has_a_title_units_and_a_caption(plots, conn):
    for name, make in plots.PLOTS.items():
        fig = make(conn)
        assert fig is not None, name
        ax = fig.axes[0]
        assert ax.get_title(), name
        labels = " ".join(a.get_xlabel() + " " + a.get_ylabel() for a in fig.axes)
        assert any(u in labels for u in ("(s)", "(min)", "(h)", "(days)", "UTC", "per ", "diagnoses")), (name, labels)
        assert _caption(fig).startswith(("Counted:", "MTBF =", "Bars:")), (name, _caption(fig))


def test_latency_histogram_leaves_requests_out(plots, conn):
    fig = plots.latency_histogram(conn)
    assert sum(p.get_height() for p in fig.axes[0].patches) == 3
    assert fig.axes[0].get_title() == "Detection latency (3 acting diagnoses)"


def test_nothing_to_draw_gives_none(plots):
    c = memory_history()
    HistorySink(c).write(build_batch(requests.REQUESTS[:1]))  # only a request: no failure to draw
    try:
        assert plots.node_class_heatmap(c) is None and plots.latency_histogram(c) is None
        assert plots.mtbf_bars(c) is None and plots.mttr_bars(c) is None
        fig = plots.faults_over_time(c)  # the request alone is still drawn, apart
        assert sum(p.get_height() for p in fig.axes[0].patches) == 0
        assert sum(p.get_height() for p in fig.axes[1].patches) == 1
    finally:
        c.close()


def test_duration_unit(plots):
    assert plots.duration_unit(30) == (1.0, "s")
    assert plots.duration_unit(1449) == (60.0, "min")
    assert plots.duration_unit(3 * 86400) == (86400.0, "days")
