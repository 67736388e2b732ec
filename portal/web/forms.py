"""Form errors next to their field: a service's refusal names the field it is about
(`StreamgateError.field`, the CLI's flag name); the page shows its `desc` beside that input,
or above the form when no input matches, and re-renders with what was typed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from portal.web.hints import refusal
from replication.errors import StreamgateError

FORM = "form"  # the key of an error about the form as a whole


def field_errors(err: StreamgateError, fields: Iterable[str],
                 aliases: Mapping[str, str] | None = None,
                 labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """{input name: plain-words error}; `aliases` maps a service's field to the input name,
    `labels` an option to the field's label as the page shows it."""
    name = (aliases or {}).get(err.field or "", err.field or "")
    return {name if name in set(fields) else FORM: refusal(err, labels)}
