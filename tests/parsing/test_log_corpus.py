"""The real-line corpus (tests/fixtures/log_corpus, scored by tools/log_corpus_score.py): the
peers' test inputs (leptonai/gpud, NVIDIA/NVSentinel, kubernetes/node-problem-detector,
NVIDIA/nvidia-resiliency-ext), lines from public bug reports, and healthy lines that must not act.

The thresholds are what the parsers reach today; a change that loses a line fails here and names it.
On the commit before issue 37 (14f7832) the same corpus scored 0.35 classified, 0.33 with the
right class, 0.87 of Xid lines with the right number; healthy lines fired 0 then and now. The
corpus was gathered while the rules were written: a new real line is the honest test.
"""

from __future__ import annotations

import pytest

from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES
from tools.log_corpus_score import rows, score

ALL = [(name, r) for name, rs in rows().items() for r in rs]


def test_every_row_is_well_formed_and_cites_its_source():
    assert len(ALL) >= 300
    for name, r in ALL:
        assert r.get("provenance"), (name, r)
        assert ("line" in r) != ("lines" in r), (name, r)
        assert r.get("source") in ("kernel", "nccl"), (name, r)
        assert r.get("healthy") or r.get("fault") is None or r["fault"] in FAULT_CLASSES, (name, r)
        assert r.get("action") is None or r["action"] in ACTIONS, (name, r)


@pytest.fixture(scope="module")
def scored():
    return score()


def test_fault_lines_are_classified(scored):
    total, by_file, _ = scored
    assert total.faults >= 280
    missed = [(m.get("line") or m.get("lines"), m["got"]) for m in total.misses if not m.get("healthy")]
    assert total.classified / total.faults >= 0.99, missed
    assert total.class_right / total.faults >= 0.99, missed
    for name, s in by_file.items():
        if s.faults:
            assert s.class_right / s.faults >= 0.95, (name, missed)


def test_every_xid_line_has_its_number(scored):
    total, _, _ = scored
    assert total.xids >= 40 and total.xid_right == total.xids


def test_healthy_lines_never_act(scored):
    total, _, _ = scored
    assert total.healthy >= 25
    assert total.fired == 0, [m for m in total.misses if m.get("healthy")]


def test_classes_covered(scored):
    _, _, by_class = scored
    for cls in ("kernel", "host_oom", "storage", "nic", "nvlink", "gpu_lost", "nccl_error", "user_code", "nan_loss"):
        assert by_class[cls].faults >= 2, cls
