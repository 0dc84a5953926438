"""Alarming lines that no rule takes are counted and mined into templates; they never act."""

from __future__ import annotations

import json
import subprocess
import sys

from faultlens.parsing.alarm import kernel_priority, looks_alarming
from faultlens.parsing.registry import parser_for
from faultlens.parsing.unrecognised import UnrecognisedMiner

# Public GitHub file, search-index id 28829096094 (a PCIe DPC/AER report on LKML).
CANT_RECOVER = [
    "[  188.369811] pci 0000:69:00.0: AER: can't recover (no error_detected callback)",
    "[  188.369812] pci 0000:6a:00.0: AER: can't recover (no error_detected callback)",
]
# leptonai/gpud pkg/kmsg/testdata/kmsg.1.log: a healthy kmsg dump.
HEALTHY = "6,4004,9184121699,-;perf: interrupt took too long (2509 > 2500), lowering kernel.perf_event_max_sample_rate to 79500"


def test_alarm_words_and_priority():
    assert looks_alarming("AER: device recovery failed")
    assert looks_alarming("NVRM: GPU at PCI:0000:00:08.0: GPU-123") is False
    assert kernel_priority("3,1,2,-;anything") == 3 and looks_alarming("anything", "3,1,2,-;anything")
    assert kernel_priority("kern  :err   : 2025-02-10T16:28:06,502716+00:00 x") == 3
    assert kernel_priority(HEALTHY) == 6 and not looks_alarming(HEALTHY.split(";", 1)[1], HEALTHY)


def test_parser_hands_alarming_skipped_lines_to_the_miner_and_counts_them():
    miner = UnrecognisedMiner()
    parser = parser_for("kernel", on_unrecognised=lambda m: miner.add(m, "kernel"))
    for line in [*CANT_RECOVER, HEALTHY, "divide error: 0000 [#1] SMP "]:
        parser.feed(line)
    assert parser.stats.alarming == 2 and parser.stats.recognised == 1  # the oops is a rule's, not the miner's
    (top,) = miner.top()
    assert top.count == 2 and "AER: can't recover" in top.template and "<PCI>" in top.template
    assert top.example.startswith("pci 0000:69:00.0")


def test_trainer_lines_count_too():
    miner = UnrecognisedMiner()
    parser = parser_for("nccl", on_unrecognised=lambda m: miner.add(m, "nccl"))
    # an error line of a program no table knows, naming nothing of any class: since round 27 the line model reads any
    # 'N: SomeError: message' a rank prints as user_code (an uncaught exception's class, docs/design.md §9), the cut
    # PicklingError message included, so the miner hears a program's own error word instead
    parser.feed("0: ERROR: the frobnicator stopped answering")
    assert parser.stats.alarming == 1 and miner.total == 1


def test_cli_writes_the_top_templates(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("\n".join([*CANT_RECOVER, HEALTHY]) + "\n")
    out = tmp_path / "missed.jsonl"
    run = subprocess.run([sys.executable, "-m", "faultlens.cli", "parse", str(log), "--source", "kernel", "--unrecognised", str(out)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""  # nothing recognised, nothing acted on
    assert "2 of them alarming" in run.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["count"] == 2 and rows[0]["source"] == "kernel"


def test_cli_refuses_a_bad_rules_file_with_its_reason(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("nothing\n")
    bad = tmp_path / "mine.toml"
    bad.write_text("[[rule]]\nid = 'x'\npattern = 'a'\nkind = 'k'\nfault = 'disk'\naction = 'evict'\n")
    run = subprocess.run([sys.executable, "-m", "faultlens.cli", "parse", str(log), "--rules", str(bad)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 2 and "mine.toml: rule 'x': fault 'disk' is not a fault class" in run.stderr
