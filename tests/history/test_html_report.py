"""`faultlens report --html`: one self-contained, escaped HTML file that renders (headless Chromium)."""

from __future__ import annotations

import base64
import html
import io
import re
from html.parser import HTMLParser

import pytest

from faultlens.cli import main
from faultlens.history.queries import run
from faultlens.history.schema import memory_history, open_history
from faultlens.history.sink import HistorySink, build_batch
from tests.helpers.chromium import chromium, needs_chromium
from tests.history import known, requests
from tests.history.report_page import render
from tests.progress import run_watched

HOSTILE = requests.RECORD_ONLY.detail  # "Xid 63 <row remap pending> & retired page"


class _Refs(HTMLParser):
    """Every tag, and every attribute that could pull in something from outside the file."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "data", "action") and value is not None:
                self.refs.append((tag, name, value))


@pytest.fixture(scope="module")
def conn():
    c = memory_history()
    HistorySink(c).write(build_batch(known.records() + requests.records(), labels=known.LABELS))
    # an acting diagnosis whose detail quotes markup, as a log line or a stack frame may
    HistorySink(c).write(build_batch([requests.RECORD_ONLY.__class__(
        id="d7", job="j1", ts=known.T0 + 115, onset=known.T0 + 114, fault="user_code", action="rollback",
        nodes=("n0",), detail="<script>alert('x')</script> in data/loader.py: if a < b && c > d")]))
    yield c
    c.close()


@pytest.fixture(scope="module")
def page(conn) -> str:
    """The report of ``conn``, rendered once (its six charts are most of a test's CPU): the tests
    below only read it, and ``conn`` is only read."""
    return render(conn, source="test.duckdb", generated_at=known.T0 + 200)


def test_self_contained(page):
    refs = _Refs()
    refs.feed(page)
    external = [r for r in refs.refs if not (r[1] == "src" and r[2].startswith("data:image/png;base64,"))
                and not (r[1] == "href" and r[2].startswith("#"))]
    assert not external, external
    assert "link" not in refs.tags and "script" not in refs.tags and "iframe" not in refs.tags
    pngs = [r[2] for r in refs.refs if r[1] == "src"]
    assert len(pngs) == 6  # job timeline, MTTR, latency, faults over time, heat map, MTBF
    for uri in pngs:
        assert base64.b64decode(uri.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_from_the_history_is_escaped(page):
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; in data/loader.py: if a &lt; b &amp;&amp; c &gt; d" in page


def test_sections_hold_the_figures(conn, page):
    text = re.sub(r"<[^>]+>", " ", page)
    for heading in ("Effective training time (ETTR) per job", "Incidents", "Time to recover (MTTR) per fault class",
                    "Detection latency", "Commands and their outcome", "Wrongly blamed"):
        assert heading in text, heading
    for job in run(conn, "ettr"):  # a card per job shows its ETTR, as the ettr query has it
        assert f"{job['ettr']:.1%}" in text and f"ETTR of {job['job']}" in text
    assert "2 of 2 labelled faults detected" in text
    assert re.search(r"stack dumps received\s*</td>\s*<td[^>]*>\s*1 usable dumps from 2 node\(s\)", page)
    assert re.search(r"<td[^>]*>n3</td><td[^>]*>nccl_error</td><td[^>]*>pp:1</td>", page)  # wrongly blamed n3
    assert "Xid 63" not in page  # record-only findings are not listed among the acting diagnoses


def test_cli_writes_the_file_and_says_where(tmp_path, capsys):
    db = tmp_path / "h.duckdb"
    c = open_history(db, create=True)
    HistorySink(c).write(build_batch(known.records() + requests.records(), labels=known.LABELS))
    c.close()
    out = tmp_path / "out" / "incident.html"
    assert main(["report", "--db", str(db), "--json", "--html", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"html report: {out.resolve()}" in captured.err
    assert all(line.startswith("{") for line in captured.out.splitlines())  # stdout stays JSON lines
    assert out.read_text().startswith("<!DOCTYPE html>")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["report", "--db", str(db), "--html", str(blocker / "r.html")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("faultlens report: cannot write")



@needs_chromium
def test_renders_in_headless_chromium(page, tmp_path):
    from PIL import Image, ImageStat

    html_file = tmp_path / "report.html"
    html_file.write_text(page, encoding="utf-8")
    shot = tmp_path / "shot.png"
    # Waited for while the browser prints, computes or writes (tests/progress.py), not 120 s.
    proc = run_watched([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={shot}", "--window-size=1280,2400", html_file.as_uri()],
                       stall_s=120, cpu=True, watch=[tmp_path], limit_s=280)
    assert shot.exists(), proc.stderr[-2000:]
    image = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    assert image.size == (1280, 2400)
    # not blank: a white page has no spread; text, tables and charts make a lot of it and many colours
    spread = ImageStat.Stat(image.convert("L")).stddev[0]
    colours = image.getcolors(maxcolors=1 << 20)
    assert spread > 20, spread
    assert colours is not None and len(colours) > 500, len(colours or [])
    # the charts' own colours are on screen (the data-URI images decoded): the heat map's reds
    assert any(r > 180 and g < 90 and b < 90 and n > 200 for n, (r, g, b) in colours)


def test_a_history_without_diagnoses_still_renders():
    c = memory_history()  # a trace loaded with --no-diagnose: events and timeline marks only
    HistorySink(c).write(build_batch(known.events()))
    try:
        page = render(c)
    finally:
        c.close()
    assert page.count("<img") == 1  # only the job timeline has data
    assert page.count("No data for the chart") == 5 and "No incidents." in page
    assert "No commands were issued." in page


def test_the_report_projects_a_big_job_from_the_historys_detection():
    from faultlens.history.html_report import render
    from faultlens.history.schema import memory_history
    from faultlens.history.sink import HistorySink, build_batch
    from faultlens.history.whatif.headline import history_rows
    from tests.history import known

    c = memory_history()
    HistorySink(c).write(build_batch(known.records(), labels=known.LABELS))
    rows = history_rows(c)
    assert rows and all(r["recall"] == 1.0 for r in rows.values())
    html = render(c, generated_at=0.0)
    assert 'id="projection"' in html and "9,600-GPU, 90-day job" in html
    assert "framework&#x27;s timeout alone" in html or "framework's timeout alone" in html
    c.close()


def test_headline_latency_is_the_one_score_prints_with_its_words(page):
    """One definition of detection latency: with ground truth the page's headline is `faultlens score`'s
    number (labelled onset → first matching diagnosis), and the words beside it say so."""
    from faultlens.diagnosis.replay.scoring import LATENCY_WORDS_EVIDENCE, LATENCY_WORDS_LABELLED, score

    diagnoses = [d for d in known.records() if d.__class__.__name__ == "Diagnosis"]
    scored = score(diagnoses, known.LABELS).overall()
    card = re.search(r'<div class="v">([^<]*) s</div><div class="k">detection latency p50 \(p99 ([^)]*) s\): ([^<]*)<',
                     page)
    assert card, page[:3000]
    assert float(card.group(1)) == pytest.approx(scored["detection_latency_p50_s"], abs=0.05)
    assert html.unescape(card.group(3)) == LATENCY_WORDS_LABELLED
    # without labels the headline is from the first evidence, and says so
    bare = memory_history()
    HistorySink(bare).write(build_batch(known.records()))
    card = re.search(r'detection latency p50 \(p99 [^)]* s\): ([^<]*)<', render(bare, generated_at=known.T0))
    assert card and html.unescape(card.group(1)) == LATENCY_WORDS_EVIDENCE


def test_charts_drawn_once_serve_the_files_and_the_page(conn, page, tmp_path, monkeypatch):
    """The demo draws each chart once (history.plots.render_pngs) for its PNG files and its report: the
    same page as a report that draws them itself, the same files as write_plots drawing them."""
    from faultlens.history import plots

    pngs = plots.render_pngs(conn)
    assert sorted(name for name, png in pngs.items() if png) == sorted(plots.PLOTS)
    written = plots.write_plots(conn, tmp_path / "drawn", pngs)
    drawn_here = plots.write_plots(conn, tmp_path / "own")
    assert {n: p.read_bytes() for n, p in written.items()} == {n: p.read_bytes() for n, p in drawn_here.items()}

    def no_drawing(conn):
        raise AssertionError("a chart was drawn again")

    monkeypatch.setattr(plots, "PLOTS", dict.fromkeys(plots.PLOTS, no_drawing))
    assert render(conn, source="test.duckdb", generated_at=known.T0 + 200, charts=pngs) == page
