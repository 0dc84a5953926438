"""bench/ and tools/ stand on their own (issue 48): no bench script, test-bed module or tool imports tests/.

The test bed both share lives in bench/testbed/ and the tests import it from there; a bench that
imported a test module would run only from a checkout laid out for pytest, and a change to a test
could silently change what a bench measures."""

from __future__ import annotations

import ast

from tests.layout import ROOT, imports_of


def imports_tests(module: str) -> bool:
    return module == "tests" or module.startswith("tests.")


def test_no_bench_or_tool_module_imports_tests():
    files = sorted([*(ROOT / "bench").rglob("*.py"), *(ROOT / "tools").rglob("*.py")])
    assert sum(p.parts[-2] == "bench" for p in files) > 20, files  # the walk found the benches (a moved folder would pass vacuously)
    offending = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in files
                 for line, module in imports_of(ast.parse(path.read_text(), str(path)))
                 if imports_tests(module)]
    assert offending == [], "bench/ or tools/ imports tests/ (move what both need to bench/testbed/):\n" + "\n".join(offending)


def test_the_check_sees_every_form_of_import():
    source = "import tests.kafka_fixtures\nfrom tests.diagnosis import foreign\ndef f():\n    from tests import progress\n"
    found = [module for _, module in imports_of(ast.parse(source)) if imports_tests(module)]
    assert found == ["tests.kafka_fixtures", "tests.diagnosis", "tests"]
    assert not imports_tests("testsuite") and not imports_tests("bench.testbed")
