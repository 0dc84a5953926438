"""How big the house's rooms are: the production modules by lines, and the functions by lines.

    .venv/bin/python -m tools.house_sizes [--modules N] [--functions N]

Lists every production module (the folders linked into faultlens/ and the CLI's own modules) of
more than ``--modules`` lines (default 400) and every function or method of more than
``--functions`` lines (default 80), longest first. docs/CONTRIBUTING.md asks for modules under ~400
lines and functions that read; tests/test_house_sizes.py holds the ceilings, with the exceptions
it names and why.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Function:
    path: str  # relative to the repository root, where the file lives (not through the links)
    name: str  # Class.method or function, nested ones as outer.inner
    line: int
    lines: int


def production_modules(root: Path = ROOT) -> list[Path]:
    """Every .py file of the production packages, once, under the folder where it lives."""
    package = root / "faultlens"
    tops = [root / p.name for p in package.iterdir() if p.is_symlink()]
    own = [p for p in package.rglob("*.py") if not any(part.is_symlink() for part in _parents(p, package))]
    found = own + [p for top in tops for p in top.rglob("*.py")]
    return sorted(p for p in found if "__pycache__" not in p.parts)


def _parents(path: Path, stop: Path) -> list[Path]:
    out = []
    while path != stop and path != path.parent:
        out.append(path)
        path = path.parent
    return out


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def functions(path: Path, root: Path = ROOT) -> list[Function]:
    """Each function and method of ``path`` with its length, from its ``def`` (or first decorator)
    to its last line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = str(path.relative_to(root))
    out: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                end = child.end_lineno or child.lineno
                out.append(Function(rel, prefix + child.name, start, end - start + 1))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def long_modules(limit: int, root: Path = ROOT) -> list[tuple[str, int]]:
    sized = [(str(p.relative_to(root)), line_count(p)) for p in production_modules(root)]
    return sorted(((p, n) for p, n in sized if n > limit), key=lambda pn: -pn[1])


def long_functions(limit: int, root: Path = ROOT) -> list[Function]:
    found = [f for p in production_modules(root) for f in functions(p, root) if f.lines > limit]
    return sorted(found, key=lambda f: -f.lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.house_sizes", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modules", type=int, default=400, help="list modules of more lines than this")
    ap.add_argument("--functions", type=int, default=80, help="list functions of more lines than this")
    args = ap.parse_args(argv)
    mods = long_modules(args.modules)
    print(f"modules over {args.modules} lines: {len(mods)} of {len(production_modules())}")
    for path, n in mods:
        print(f"  {n:5d}  {path}")
    funcs = long_functions(args.functions)
    print(f"functions over {args.functions} lines: {len(funcs)}")
    for f in funcs:
        print(f"  {f.lines:5d}  {f.path}:{f.line}  {f.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
