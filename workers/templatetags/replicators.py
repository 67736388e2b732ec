"""`{% replicators_listed as replicators %}`: the replicators for the overview's card
(templates/web/_replicators.html), as `streamgate replicator list` shows them."""

from __future__ import annotations

from typing import Any

import structlog
from django import template

from replication.transport import transport
from replication.transport.leases import replicator_rows

register = template.Library()
log = structlog.get_logger(__name__)


@register.simple_tag
def replicators_listed() -> dict[str, Any]:
    try:
        rows = replicator_rows(transport().leases)
    except Exception as error:  # Redis unreachable: the page still renders, and says so
        log.warning("replicator_list_failed", error=str(error))
        return {"rows": [], "live": 0, "error": f"presence unreachable: {error}"}
    return {"rows": rows, "live": sum(r["alive"] for r in rows), "error": ""}
