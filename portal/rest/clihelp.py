"""Write streamgate/commands.json, the command line's copy of the /rest command registry, so
`streamgate help` works with no server (streamgate/help.py reads it).

    python -m portal.rest.clihelp          # or: make clihelp

Run it after adding or changing a /rest command; tests/streamgate/test_help.py fails until
the file matches the registry.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

HELP_FILE = Path(__file__).resolve().parents[2] / "streamgate" / "commands.json"


def registry_rows() -> list[dict[str, Any]]:
    """What GET /rest/ answers: every command with its usage, summary and options."""
    from portal.rest.commands import REGISTRY

    return [spec.describe() for _, spec in sorted(REGISTRY.items())]


def render(rows: list[dict[str, Any]]) -> str:
    # One command a line: a new command is a new line, so branches adding commands merge.
    return "[\n" + ",\n".join(json.dumps(row, sort_keys=True) for row in rows) + "\n]\n"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    HELP_FILE.write_text(render(registry_rows()))
    print(f"wrote {HELP_FILE}")


if __name__ == "__main__":
    main()
