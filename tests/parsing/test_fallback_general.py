"""The general fallback (issue 54): an error line of a driver the subsystem table names without a class
is guessed by the line model at a firmer bar (parsing.fallback.DRIVER_WITHOUT_CLASS), not left unread.

tools/fallback_backtest.py chose it on the pairs fresh29-46 as met unread and held it on fresh47-56.
"""

from __future__ import annotations

from typing import Any

import pytest

from faultlens.parsing import fallback, line_model
from faultlens.parsing.registry import parser_for
from faultlens.parsing.subsystems import attribute
from faultlens.parsing.timestamps import split_timestamp

# Error lines of drivers the table names without a class (by the line's shape): the tag is read, no class comes with it,
# and no rule has words for the form. Written for this test (the opened batches' such lines are all ruled by now); no
# kernel clock, so no boot window quiets them.
UNCLASSED_ERRORS = (
    ("radeon 0000:01:00.0: GPU lockup detected, ring 0 stalled", "gpu_reset_required"),
    ("zfsx: pool tank suspended: uncorrectable I/O failure on vdev", "storage"),
)


class _Sure:
    """A model stand-in that reads every line as ``fault`` with ``confidence``."""

    def __init__(self, fault: str, confidence: float):
        self.fault, self.confidence = fault, confidence

    def guess(self, line: str, source: str = "kernel") -> line_model.Guess | None:
        return line_model.Guess(self.fault, self.confidence) if self.confidence >= line_model.THRESHOLD else None


def _acting(events: list[Any]) -> list[Any]:
    return [e for e in events if e.data.get("action") not in (None, "none")]


@pytest.mark.parametrize(("line", "fault"), UNCLASSED_ERRORS)
def test_the_shipped_model_reads_an_unclassed_drivers_error(line: str, fault: str) -> None:
    att = attribute(split_timestamp(line).message)
    assert att is not None and att.fault is None  # the premise: a driver named, no class
    events = _acting(parser_for("kernel").feed(line))
    assert [(e.kind, e.data["fault"], e.data["action"], e.data["subsystem"]) for e in events] == [
        ("suspect_line", fault, "alert", att.subsystem)
    ]
    assert "no class in the subsystem table" in events[0].data["finding"]
    assert events[0].data["confidence"] >= fallback.DRIVER_WITHOUT_CLASS


def test_an_unclassed_driver_needs_the_firmer_bar() -> None:
    line = "zorbdrv 0000:03:00.0: firmware load failed"
    with line_model.using(_Sure("nic", 0.65)):  # enough for a line no driver is named on, not for this one
        assert fallback.kernel_line(line, line) == (None, "")
    with line_model.using(_Sure("nic", 0.75)):
        found, basis = fallback.kernel_line(line, line)
    assert basis == "model" and found is not None
    assert (found[0][1]["fault"], found[0][1]["action"], found[0][1]["subsystem"]) == ("nic", "alert", "zorbdrv")


def test_a_line_no_driver_is_named_on_keeps_the_models_own_bar() -> None:
    line = "firmware load failed on the second port"
    assert attribute(line) is None
    with line_model.using(_Sure("nic", 0.65)):
        found, basis = fallback.kernel_line(line, line)
    assert basis == "model" and found is not None and "subsystem" not in found[0][1]


def test_an_unclassed_drivers_line_that_is_no_error_is_not_asked() -> None:
    line = "zorbdrv 0000:03:00.0: firmware version 2.1 loaded"
    with line_model.using(_Sure("nic", 0.99)):
        assert fallback.kernel_line(line, line) == (None, "")


def test_a_host_label_read_as_a_tag_is_no_driver() -> None:
    # Thunderbird's syslog keeps its facility@host before the program: the shape reader takes it for a driver's tag.
    line = "local@tbird-admin1 ntpd[1815]: time reset +0.182379 s"
    att = attribute(line)
    assert att is not None and att.fault is None and not fallback.names_a_driver(att)
    with line_model.using(_Sure("clock_skew", 0.99)):
        assert fallback.kernel_line(line, line) == (None, "")


def test_a_form_the_catalogue_has_words_for_is_its_rules_to_judge() -> None:
    line = "sas: Enter sas_scsi_recover_host busy: 0 failed: 0"  # storage.libsas_error_handler's form, its count of none
    att = attribute(line)
    assert att is not None and att.fault is None and fallback.catalogue_knows(line)
    with line_model.using(_Sure("storage", 0.99)):
        assert fallback.kernel_line(line, line) == (None, "")


def test_a_level_word_read_as_a_tag_is_no_driver() -> None:
    line = "error: Munge decode failed: Invalid credential"  # slurmctld's level, then MUNGE's refusal (not the clock's)
    att = attribute(line)
    assert att is not None and att.fault is None and not fallback.names_a_driver(att)
    with line_model.using(_Sure("clock_skew", 0.99)):
        assert fallback.kernel_line(line, line) == (None, "")
