"""The kernel parser's one-scan pre-filter (parsing.kernel_log._prefilter) settles lines that hold
none of the parser's literals; it must never change what a line gives. Every real kernel line we
hold (the corpus, held-out set included, and the samples the parser tests use) is fed to a parser
with the pre-filter and one without, and their events and counters must agree."""

from __future__ import annotations

import ast
import inspect
import json

from bench.testbed import log_samples as S
from faultlens.parsing import kernel_gpu, kernel_log
from faultlens.parsing.kernel_log import CODE_LITERALS, KernelLogParser
from faultlens.parsing.line_corpus import open_files


def _kernel_lines() -> list[str]:
    lines = []
    for path in open_files():  # not the sealed batches'
        for text in path.read_text(encoding="utf-8").splitlines():
            if text.strip():
                row = json.loads(text)
                if row.get("source", "kernel") == "kernel":
                    lines.extend(row["lines"] if "lines" in row else [row["line"]])
    lines += [v for v in vars(S).values() if isinstance(v, str)]
    lines += [x for v in vars(S).values() if isinstance(v, list) for x in v if isinstance(x, str)]
    # A level of err with no word of trouble: only the pre-filter's priority check lets it through.
    lines += ["3,1234,5678,-;ena 0000:00:05.0 eth0: device went away", "<3>mydrv: something happened", "kern  :err   : xyz: gone"]
    return lines


def _run(parser: KernelLogParser, lines: list[str]) -> list[tuple[str, dict]]:
    out = []
    for line in lines:
        out.extend((e.kind, e.data) for e in parser.feed(line))
    return out


def test_the_prefilter_changes_no_line():
    lines = _kernel_lines()
    assert len(lines) > 300
    fast, slow = KernelLogParser(now=1.8e9), KernelLogParser(now=1.8e9)
    assert fast._prefilter is not None
    slow._prefilter = None
    assert _run(fast, lines) == _run(slow, lines)
    assert fast.stats == slow.stats
    assert fast.stats.recognised > 200 and fast.stats.skipped > 0


def _in_literals(func) -> set[str]:
    """The lowered constants of every ``"literal" in x`` test in ``func``'s source."""
    source = inspect.getsource(func)
    indent = len(source) - len(source.lstrip())
    tree = ast.parse("\n".join(line[indent:] for line in source.splitlines()))
    return {node.left.value.lower() for node in ast.walk(tree)
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.ops[0], ast.In)}


def test_the_prefilter_holds_every_literal_the_code_dispatches_on():
    """Each ``"literal" in msg`` / ``in lower`` test of KernelLogParser._code is in CODE_LITERALS, or
    is a branch whose handler's own literals (NARROWED) the pre-filter holds instead."""
    found = _in_literals(kernel_log.KernelLogParser._code)
    assert found and found <= set(CODE_LITERALS) | set(kernel_log.NARROWED), found - set(CODE_LITERALS) - set(kernel_log.NARROWED)
    words = {w for ws in kernel_log.NARROWED.values() for w in ws}
    pattern = KernelLogParser()._prefilter
    assert all(pattern.search(w) for w in words)


def test_the_nvrm_literals_are_those_the_driver_lines_are_read_by():
    """GpuLines.nvrm reads a line only for one of its literals: the pre-filter's NVRM words are those."""
    assert _in_literals(kernel_gpu.GpuLines.nvrm) == set(kernel_gpu.NVRM_LITERALS)


def test_a_chatty_driver_line_is_settled_by_the_prefilter_and_a_telling_one_is_not():
    parser = KernelLogParser(now=1.8e9)
    quiet = ["[   13.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05", "[   30.5] mlx5_core 0000:5e:00.0: firmware version: 28.39.1002",
             "[ 9001.0] docker0: port 3(veth12ab) entered forwarding state", "[   12.3] nvidia-nvlink: Nvlink Core is being initialized"]
    assert [parser.feed(line) for line in quiet] == [[], [], [], []]
    assert parser.stats.skipped == 4 and parser.stats.recognised == 0
    told = parser.feed("[ 9001.5] mlx5_core 0000:5e:00.0 ib0: Link down")
    assert [e.kind for e in told] == ["link_down"]


def test_user_rules_without_needles_turn_the_prefilter_off(tmp_path):
    from faultlens.parsing.rules import parse_catalogue

    rules = parse_catalogue('[[rule]]\nid = "x.any"\nsource = "kernel"\npattern = "frobnicated"\nkind = "kernel_error"\nfault = "kernel"\n'
                            'action = "alert"\nseverity = "error"\nexample = "frobnicated"\n', "t.toml")
    parser = KernelLogParser(rules=rules)
    assert parser._prefilter is None
    assert [e.kind for e in parser.feed("[ 1.0] foo: frobnicated")] == ["kernel_error"]
