"""No test file imports a heavy library when it is collected: every xdist worker collects every test
file (seven on CI), and one worker runs it. torch at a file's top cost each worker ~1.7 CPU-s,
matplotlib and pandas (faultlens.history.plots) ~1, the notebook client and kubernetes ~0.2-0.4
each: a test imports them when it runs (tests/trainer_hooks/torch_lazy.py, tests/history/report_page.py).

Read from the files' syntax, not by importing them: the top-level imports of each test file and
conftest, and of the tests.* modules those import at their top, outside ``if TYPE_CHECKING:``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.layout import ROOT

TESTS = ROOT / "tests"
HEAVY = (
    "torch",
    "lightning",
    "pytorch_lightning",
    "transformers",
    "nbclient",
    "nbformat",
    "kubernetes",
    "matplotlib",
    "sklearn",
    "scipy",
)
# ours that import one of those at their top
HEAVY_OURS = (
    "faultlens.history.plots",
    "faultlens.history.html_report",
    "faultlens.trainer_hooks.poet",
    "faultlens.trainer_hooks.reference_trainer",
    "faultlens.trainer_hooks.hf",
    "faultlens.trainer_hooks.lightning",
)


def _is_heavy(module: str) -> bool:
    return module.split(".")[0] in HEAVY or any(module == m or module.startswith(m + ".") for m in HEAVY_OURS)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """What runs at import: the module's statements, into if/else and try blocks (not TYPE_CHECKING's)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            if not _type_checking(node):
                yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _top_level(block)


def imported_at_top(tree: ast.Module) -> Iterator[str]:
    """The modules a file imports when it is imported (``importorskip`` of one counts)."""
    for node in _top_level(tree.body):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, (ast.Expr, ast.Assign)) and isinstance(node.value, ast.Call):
            call = node.value
            name = getattr(call.func, "attr", None) or getattr(call.func, "id", None)
            if name == "importorskip" and call.args and isinstance(call.args[0], ast.Constant):
                yield str(call.args[0].value)


def _test_module_file(module: str) -> Path | None:
    if not module.startswith("tests."):
        return None
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def heavy_at_collection(path: Path, known: dict[Path, list[str]] | None = None) -> list[str]:
    """The heavy modules ``path`` imports at its top, itself or through a tests.* module it imports there.
    ``known``: each file's answer, shared across calls (the helpers most test files import are read once;
    a file found again while it is being read counts nothing, its answer comes where it began)."""
    known = {} if known is None else known
    if path in known:
        return known[path]
    known[path] = []
    found = []
    for module in imported_at_top(ast.parse(path.read_text(), filename=str(path))):
        if _is_heavy(module):
            found.append(module)
        elif (helper := _test_module_file(module)) is not None:
            found += [f"{module} -> {m}" for m in heavy_at_collection(helper, known)]
    known[path] = found
    return found


def _collected() -> list[Path]:
    return sorted(
        p
        for p in TESTS.rglob("*.py")
        if "fixtures" not in p.relative_to(TESTS).parts and (p.name.startswith("test_") or p.name == "conftest.py")
    )


def test_no_test_file_imports_a_heavy_library_when_collected():
    known: dict[Path, list[str]] = {}
    found = {str(p.relative_to(ROOT)): heavy for p in _collected() if (heavy := heavy_at_collection(p, known))}
    assert found == {}, found


def test_the_check_sees_a_heavy_import_at_a_files_top_and_through_a_helper(tmp_path):
    top = ast.parse("import pytest\nimport torch\n")
    skip = ast.parse("import pytest\ntorch = pytest.importorskip('torch')\n")
    typed = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n")
    inside = ast.parse("def f():\n    import torch\n")
    assert [m for m in imported_at_top(top) if _is_heavy(m)] == ["torch"]
    assert [m for m in imported_at_top(skip) if _is_heavy(m)] == ["torch"]
    assert [m for m in imported_at_top(typed) if _is_heavy(m)] == []
    assert [m for m in imported_at_top(inside) if _is_heavy(m)] == []
    test = tmp_path / "test_x.py"
    test.write_text("from tests.trainer_hooks import eval_parts\n")  # a helper that imports torch at its top
    assert "tests.trainer_hooks.eval_parts -> torch" in heavy_at_collection(test)
    test.write_text("from faultlens.history import html_report\n")
    assert heavy_at_collection(test) == ["faultlens.history.html_report"]
