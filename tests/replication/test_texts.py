"""The domain and the Kafka interface name no command line: what to do is a `Hint` or plain
words, and /rest and the CLI render the command (portal/rest/hints.py, the alarm list)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("replication", "operations", "accounts", "broker")


def _strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_no_text_of_the_domain_or_the_listener_names_a_cli_command():
    found = [f"{path.relative_to(ROOT)}:{line}: {text!r}"
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
             if "migrations" not in path.parts
             for line, text in _strings(path) if "'streamgate " in text]
    assert found == []
