"""The repository's layout as the tests read it: the top-level folders linked into the package, and
the imports a source file makes.

The links (faultlens/NAME -> ../NAME) are the one list of those folders: the packaging follows them
(a wheel copies each into faultlens/), and the tests that need the list (the bare-name check, the
light install, the static checks, the design-name scan, the layers) read it here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def linked_folders() -> tuple[str, ...]:
    """The top-level folders linked into faultlens/, sorted: `events`, `streams`, ..."""
    return tuple(sorted(p.name for p in (ROOT / "faultlens").iterdir() if p.is_symlink()))


def imports_of(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) for every absolute import statement, wherever it stands (module level or inside a function)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found
