"""Lines that look alarming but match no rule: counted and mined into templates, never acted on.

A parser that misses a line prints nothing, so nobody learns it was missed. The parsers hand every
line they skip to :func:`parsing.alarm.looks_alarming`; those that say error / fail / fault / timeout / abort
(or carry kernel priority err or worse) go to an :class:`UnrecognisedMiner`, which folds them
into Drain3 templates (``nvme nvme<*>: controller is down; will reset: CSTS=<*>``) with a count
and one real example each. ``faultlens parse --unrecognised FILE`` writes the top templates, so a
person can turn a frequent one into a rule (parsing/rules.toml format, ``--rules FILE``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from drain3 import TemplateMiner
from drain3.masking import MaskingInstruction
from drain3.template_miner_config import TemplateMinerConfig

# Variable parts masked before mining, so one message from many devices / processes is one template.
_MASKS = (
    (r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?\b", "PCI"),
    (r"\b0x[0-9a-fA-F]+\b", "HEX"),
    (r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b", "IP"),
    (r"\bGPU-[0-9a-fA-F\-]{8,}\b", "UUID"),
    (r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.])", "NUM"),
)
_STAMP = re.compile(r"^\s*\[\s*\d+\.\d+\]\s*")


def _config(max_clusters: int) -> TemplateMinerConfig:
    config = TemplateMinerConfig()
    config.profiling_enabled = False
    config.drain_sim_th = 0.5
    config.drain_max_clusters = max_clusters  # bounded memory on a node that logs garbage forever
    config.masking_instructions = [MaskingInstruction(pattern, name) for pattern, name in _MASKS]
    return config


@dataclass(frozen=True)
class Template:
    count: int
    template: str
    example: str
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "template": self.template, "example": self.example, "source": self.source}


@dataclass
class UnrecognisedMiner:
    """Drain3 templates of the alarming lines no rule took, per source (kernel / nccl)."""

    max_clusters: int = 1000
    total: int = 0
    _miners: dict[str, TemplateMiner] = field(default_factory=dict)
    _examples: dict[tuple[str, int], str] = field(default_factory=dict)

    def add(self, message: str, source: str = "kernel") -> None:
        text = _STAMP.sub("", message).strip()[:1024]
        if not text:
            return
        miner = self._miners.get(source)
        if miner is None:
            miner = self._miners[source] = TemplateMiner(config=_config(self.max_clusters))
        result = miner.add_log_message(text)
        self.total += 1
        self._examples.setdefault((source, result["cluster_id"]), text)

    def top(self, n: int = 20) -> list[Template]:
        out = [
            Template(c.size, c.get_template(), self._examples.get((source, c.cluster_id), ""), source)
            for source, miner in self._miners.items()
            for c in miner.drain.clusters
        ]
        out.sort(key=lambda t: (-t.count, t.template))
        return out[:n]
