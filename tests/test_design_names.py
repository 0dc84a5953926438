"""docs/design.md names what the code names: every fault class, action, topic, event kind and
command of the code has its line there, and the document names none the code lacks. A name added to
the code alone (or to the document alone) fails here, so the design a newcomer reads stays the
design that runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from faultlens.commands import COMMAND_NAMES
from faultlens.events import topics
from faultlens.events.action_record import HARDWARE_INSPECTION
from faultlens.events.command import COMMAND_ACTIONS
from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES
from faultlens.events.payloads import SCHEMAS
from tests.layout import linked_folders

DESIGN = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text()


def _section(number: int) -> str:
    start = DESIGN.index(f"\n## {number}. ")
    end = DESIGN.find("\n## ", start + 1)
    return DESIGN[start:] if end < 0 else DESIGN[start:end]


def _paragraph(section: str, opening: str) -> str:
    """The paragraph of a section that begins with ``opening``."""
    start = section.index(opening)
    end = section.find("\n\n", start)
    return section[start:] if end < 0 else section[start:end]


def _names(text: str) -> set[str]:
    return set(re.findall(r"`([a-z][a-z0-9_.\-]*)`", text))


SECTION_9 = _section(9)


def test_every_fault_class_is_named_and_the_document_names_no_other():
    named = _names(_paragraph(SECTION_9, "Fault classes"))
    # hardware_inspection is the fleet's state of a drained lemon, named with the classes it follows.
    assert named - {HARDWARE_INSPECTION} == set(FAULT_CLASSES)


def test_every_action_is_named_and_the_document_names_no_other():
    assert _names(_paragraph(SECTION_9, "Diagnosis actions")) == set(ACTIONS)
    assert _names(_paragraph(SECTION_9, "Command actions")) == set(COMMAND_ACTIONS)
    # §6 lists the command record's actions too.
    assert set(COMMAND_ACTIONS) <= _names(_section(6))


def test_every_topic_is_named_and_the_document_names_no_other():
    code = set(topics.TOPICS)
    named = _names(_paragraph(SECTION_9, "Topics ("))
    assert named == code


def test_every_event_kind_of_the_code_is_in_the_kinds_table():
    rows = {}
    for line in _section(2).splitlines():
        m = re.match(r"\| `(\w+)` \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = _names(m.group(2))
    missing = sorted(f"{source}/{kind}" for source, kind in SCHEMAS if kind not in rows.get(source, set()))
    assert missing == []


def test_every_command_is_named_and_the_document_names_no_other():
    named = set(re.findall(r"`faultlens ([a-z][a-z-]*)", SECTION_9))
    assert named == set(COMMAND_NAMES)


@pytest.mark.parametrize("name", ["DESIGN.md", "../shared", "/work/shared"])
def test_nothing_outside_the_repository_is_cited(name):
    root = Path(__file__).resolve().parents[1]
    citing = []
    for folder in (*linked_folders(), "faultlens", "tools", "bench", "docs"):
        for path in (root / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".md", ".toml", ".sh"} and name in path.read_text(errors="replace"):
                citing.append(str(path.relative_to(root)))
    citing += [f for f in ("README.md",) if name in (root / f).read_text()]
    assert citing == []
