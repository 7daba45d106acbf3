"""Every function in ``electra`` stays readable at once: at most 60 lines, def line to last."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "electra"
LIMIT = 60


def long_functions(root: Path, limit: int = LIMIT) -> list[str]:
    """``file:line name (n lines)`` for each function under ``root`` longer than ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines})")
    return found


def test_no_function_in_electra_is_longer_than_60_lines() -> None:
    long = long_functions(PACKAGE)
    assert not long, "functions over 60 lines: " + "; ".join(long)


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n", encoding="utf-8")
    assert long_functions(tmp_path) == ["m.py:1 f (61)"]
