"""The trainer parser's one-scan pre-filter (parsing.trainer_log._prefilter) settles lines that hold
none of the literals its readings need and no word of trouble; it must never change what a line
gives. Every trainer line we hold (the corpus, held-out set included, and the parser tests'
samples) is fed to a parser with the pre-filter and one without, in order and shuffled (so
tracebacks of several ranks stay open across foreign lines), and their events and counters must
agree."""

from __future__ import annotations

import json
import random

from bench.testbed import log_samples as S
from faultlens.parsing.line_corpus import open_files
from faultlens.parsing.trainer_log import TrainerLogParser


def _trainer_lines() -> list[str]:
    lines = []
    for path in open_files():  # not the sealed batches'
        for text in path.read_text(encoding="utf-8").splitlines():
            if text.strip():
                row = json.loads(text)
                if row.get("source", "kernel") != "kernel":
                    lines.extend(row["lines"] if "lines" in row else [row["line"]])
    lines += [v for v in vars(S).values() if isinstance(v, str)]
    lines += [x for v in vars(S).values() if isinstance(v, list) for x in v if isinstance(x, str)]
    # Words the pre-filter must not miss: "inf" as a word (not INFO's), NCCL INFO lines with trouble.
    lines += ["[rank2]: step 40 | loss inf | grad_norm inf", "host:1:1 [0] NCCL INFO NET/IB : Got async event : port error",
              "[rank0]: 2026-11-22 10:11:12,345 - train - INFO - step 9 | loss 2.1",
              "[rank3]: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4130",
              "[rank1]: Connection reset by peer", "[rank5]: write: Broken pipe", "CUBLAS_STATUS_NOT_SUPPORTED in cublasGemmEx",
              "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
              "[rank6]: CUDA kernel: an illegal memory access was encountered", "[rank7]: watchdog thread: NCCL work 77 done"]
    return lines


def _run(parser: TrainerLogParser, lines: list[str]) -> list[tuple[str, dict]]:
    out = []
    for line in lines:
        out.extend((e.kind, e.data, e.ts) for e in parser.feed(line, ts=1.8e9))
    out.extend((e.kind, e.data, e.ts) for e in parser.flush())
    return out


def _agree(lines: list[str]) -> TrainerLogParser:
    fast, slow = TrainerLogParser(now=1.8e9), TrainerLogParser(now=1.8e9)
    assert fast._prefilter is not None
    slow._prefilter = None
    assert _run(fast, lines) == _run(slow, lines)
    assert fast.stats == slow.stats
    return fast


def test_the_prefilter_changes_no_line():
    fast = _agree(_trainer_lines())
    assert fast.stats.recognised > 100 and fast.stats.skipped > 100


def test_the_prefilter_changes_no_line_among_interleaved_ranks():
    lines = _trainer_lines()
    for seed in range(3):
        rng = random.Random(seed)
        # Rank prefixes on a shuffled copy: tracebacks of one rank open across other ranks' lines.
        mixed = [f"[rank{rng.randrange(4)}]: {line}" if rng.random() < 0.7 else line for line in rng.sample(lines, len(lines))]
        _agree(mixed)


def test_an_ordinary_line_is_settled_unread_and_a_telling_one_is_not():
    parser = TrainerLogParser(now=1.8e9)
    for line in ("host:1:1 [3] NCCL INFO Connected all rings", "[rank1]: 2026-11-22 10:11:12,345 - train - INFO - step 3 | loss 2.1"):
        assert parser.feed(line) == []
    assert parser.stats.skipped == 2
    assert [e.kind for e in parser.feed("[rank1]: step 4 | loss nan | grad_norm inf")] == ["nan"]
