"""Issue 47: broad catches only at process boundaries, with the reason; no ``assert`` for a
precondition (asserts vanish under ``python -O``). Read from the source files of the product
folders (those the wheel ships)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("backlog_source", "core", "enumerator", "reader", "events", "split")
#: What a broad handler's comment says: why it is a boundary, or that it only cleans up.
REASONS = ("# process boundary: ", "# cleanup, then re-raised")


def _modules():
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT), path.read_text()


def _broad(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(isinstance(k, ast.Name) and k.id in ("Exception", "BaseException")
                                       for k in kinds)


def test_every_broad_catch_says_why():
    unexplained = []
    for path, text in _modules():
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ExceptHandler) and _broad(node):
                line = lines[node.lineno - 1]
                cleanup_only = REASONS[1] in line and isinstance(node.body[-1], ast.Raise) and node.body[-1].exc is None
                if not (REASONS[0] in line or cleanup_only):
                    unexplained.append(f"{path}:{node.lineno}: {line.strip()}")
    assert unexplained == []


def test_no_assert_in_product_code():
    found = [f"{path}:{node.lineno}" for path, text in _modules()
             for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Assert)]
    assert found == []
