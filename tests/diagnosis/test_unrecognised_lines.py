"""The node stage mines the alarming raw lines no rule took (never acting on them) and counts
them on the faultlens_log_lines_unrecognised metric."""

from __future__ import annotations

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.envelope import Envelope
from faultlens.streams import metrics

# Public GitHub file, search-index id 28829096094 (a PCIe DPC/AER report on LKML).
LINES = ["[  188.369811] pci 0000:69:00.0: AER: can't recover (no error_detected callback)",
         "[  188.369812] pci 0000:6a:00.0: AER: can't recover (no error_detected callback)"]


def test_node_stage_mines_unrecognised_lines_and_counts_them():
    before = metrics.UNRECOGNISED.labels(source="kernel")._value.get()
    events = [Envelope(ts=1_800_000_000.0 + i, job="j1", node="n1", source="kernel", kind="line", data={"line": line}, id=f"l{i}")
              for i, line in enumerate(LINES)]
    engine = Engine(EngineConfig(implicit=False, peer_model=False))
    assert analyze(events, engine) == []  # never acted on
    [top] = engine.node_stage.unrecognised.top()
    assert top.count == 2 and top.source == "kernel" and "can't recover" in top.template
    assert metrics.UNRECOGNISED.labels(source="kernel")._value.get() == before + 2
