"""The HTML report's projected largest losses each say where their seconds come from, as the demo
prints them (history/whatif/headline.loss_source_words): a preset's guess must not read as this
history's measurement."""

from __future__ import annotations

from html.parser import HTMLParser

from faultlens.history.schema import memory_history
from faultlens.history.sink import HistorySink, build_batch
from faultlens.history.whatif import headline
from tests.helpers.chromium import chromium, needs_chromium
from tests.history import known
from tests.history.report_page import render
from tests.progress import run_watched


class _ProjectionTable(HTMLParser):
    """The rows of the first table after the projection's heading: (cell texts, each cell's class)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen_heading = self.in_table = self.done = False
        self.rows: list[list[tuple[str, str]]] = []
        self._cell: list[str] | None = None
        self._css = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "h3" and attrs.get("id") == "projection":
            self.seen_heading = True
        elif tag == "table" and self.seen_heading and not self.done:
            self.in_table = True
        elif self.in_table and tag == "tr":
            self.rows.append([])
        elif self.in_table and tag in ("td", "th"):
            self._cell, self._css = [], attrs.get("class") or ""

    def handle_endtag(self, tag):
        if self.in_table and tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(("".join(self._cell).strip(), self._css))
            self._cell = None
        elif tag == "table" and self.in_table:
            self.in_table, self.done = False, True

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _rows(page: str) -> list[list[tuple[str, str]]]:
    parser = _ProjectionTable()
    parser.feed(page)
    return parser.rows


def _history():
    c = memory_history()
    HistorySink(c).write(build_batch(known.records(), labels=known.LABELS))
    return c


def test_each_largest_loss_says_where_its_seconds_come_from():
    c = _history()
    try:
        expected = headline.headline(headline.history_rows(c))["largest_losses"]
        page = render(c, generated_at=0.0)
    finally:
        c.close()
    head, *body = _rows(page)
    assert [text for text, _ in head] == ["cause", "share", "its seconds come from"]
    assert [[text for text, _ in row] for row in body] == [
        [x["cause"], f"{x['share']:.2%}", headline.loss_source_words(x)] for x in expected
    ]
    # this history measured detection only: its three largest losses rest on the preset's guesses
    assert all(row[2] == ("the preset (assumed: a guess)", "guess") for row in body)


def test_a_measured_loss_says_its_samples_and_a_thin_one_is_marked_a_guess(monkeypatch):
    projection = {
        "gpus": 9600,
        "days": 90.0,
        "ettr": 0.95,
        "ettr_monte_carlo": 0.94,
        "ettr_ci": [0.93, 0.95],
        "timeout_only_ettr": 0.9,
        "checkpoint_interval_optimal_s": 1800.0,
        "measured_classes": ["nic"],
        "largest_losses": [
            {"cause": "nic detection", "share": 0.004, "source": "measured", "samples": 6, "guess": False},
            {"cause": "job hang detection", "share": 0.003, "source": "measured", "samples": 2, "guess": True},
            {"cause": "cuda error recovery", "share": 0.001, "source": "preset", "kind": "published"},
        ],
    }
    monkeypatch.setattr(headline, "headline", lambda rows: projection)
    c = _history()
    try:
        page = render(c, generated_at=0.0)
    finally:
        c.close()
    _, *body = _rows(page)
    assert [row[2] for row in body] == [
        ("this run, 6 samples", ""),
        ("this run, 2 samples: treat it as a guess", "guess"),
        ("the preset (published)", ""),
    ]



@needs_chromium
def test_the_rendered_report_shows_the_sources(tmp_path):
    """The DOM as the browser built it (not the text we wrote): the column and its words are there."""
    c = _history()
    try:
        page = render(c, generated_at=0.0)
    finally:
        c.close()
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    proc = run_watched(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
        stall_s=120,
        cpu=True,
        limit_s=280,
    )
    head, *body = _rows(proc.stdout)
    assert [text for text, _ in head] == ["cause", "share", "its seconds come from"], proc.stderr[-2000:]
    assert len(body) == 3 and all(row[2] == ("the preset (assumed: a guess)", "guess") for row in body)
