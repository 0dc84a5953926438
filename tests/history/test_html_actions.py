"""The HTML report's "Actions taken": every command, the diagnosis behind it and what its receivers
answered, written by `faultlens report --html` from a history file (tests/history/answered.py)."""

from __future__ import annotations

from html.parser import HTMLParser

from faultlens.cli import main
from tests.history.answered import acks, write_history


class _Section(HTMLParser):
    """The heading, header cells and body rows (cell text, cell class) of the first table after
    ``<h2 id=ANCHOR>``."""

    def __init__(self, anchor: str) -> None:
        super().__init__()
        self.anchor = anchor
        self.state = "before"  # → "in" (from the heading) → "done" (after its table)
        self.heading = ""
        self.header: list[str] = []
        self.rows: list[list[tuple[str, str]]] = []
        self._cell: list[str] | None = None
        self._cls = ""
        self._in_heading = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "h2" and attrs.get("id") == self.anchor and self.state == "before":
            self.state, self._in_heading = "in", True
        elif self.state == "in" and tag == "tbody":
            self.rows = []
        elif self.state == "in" and tag == "tr":
            self.rows.append([])
        elif self.state == "in" and tag in ("td", "th"):
            self._cell, self._cls = [], attrs.get("class") or ""

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_heading = False
        elif self.state == "in" and tag in ("td", "th") and self._cell is not None:
            text = "".join(self._cell).strip()
            if tag == "th":
                self.header.append(text)
            else:
                self.rows[-1].append((text, self._cls))
            self._cell = None
        elif self.state == "in" and tag == "table":
            self.state = "done"

    def handle_data(self, data):
        if self._in_heading:
            self.heading += data
        if self._cell is not None:
            self._cell.append(data)


def test_the_report_lists_every_action_with_its_diagnosis_and_answer(tmp_path, capsys):
    db, out = tmp_path / "h.duckdb", tmp_path / "report.html"
    write_history(db, acks())
    assert main(["report", "--db", str(db), "--html", str(out)]) == 0
    capsys.readouterr()
    section = _Section("actions")
    section.feed(out.read_text(encoding="utf-8"))
    assert section.heading == "Actions taken"
    assert section.header == ["issued (UTC)", "job", "action", "nodes", "diagnosis", "fault class", "confidence",
                              "receivers", "acks", "refused because", "reason"]
    rows = [dict(zip(section.header, (text for text, _ in r), strict=True)) for r in section.rows]
    css = [dict(zip(section.header, (cls for _, cls in r), strict=True)) for r in section.rows]
    assert [(r["job"], r["action"], r["nodes"], r["diagnosis"]) for r in rows] == [
        ("j1", "evict", "n2, n3, n0", "d2"),   # T0+91
        ("j1", "evict", "n1", "d1"),           # c1, T0+115
        ("j1", "evict", "n9", "(none)"),       # cu, T0+118
        ("j2", "evict", "n0", "d4"),           # cf, D+17
    ]
    c2, c1, cu, cf = rows
    assert c1["issued (UTC)"] == "2023-11-14 00:01:55" and c1["fault class"] == "gpu_lost"
    assert c1["receivers"] == "obeyed" and c1["acks"] == "1 obeyed, 1 refused"
    assert c1["refused because"].startswith("duplicate")  # a later duplicate, refused: the eviction still happened
    assert c2["receivers"] == "no answer" and c2["acks"] == "-" and c2["fault class"] == "nccl_error"
    assert cu["receivers"] == "no answer"  # only the spokesperson said it was not for it
    assert cf["receivers"] == "refused" and cf["acks"] == "0 obeyed, 2 refused"
    assert cf["refused because"].startswith("signed with unknown key") and cf["fault class"] == "gpu_thermal"
    assert "bad" in css[3]["receivers"].split() and "good" in css[1]["receivers"].split()
