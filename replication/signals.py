"""Seams for what the domain does that layers above must record (DESIGN.md: a lower layer
never imports a higher one). `operations.audit` connects to these in its AppConfig.ready."""

from django.dispatch import Signal

# A stream's messages were deleted by hand (`stream purge`). Sent after the delete with
# stream=, actor=, details= (a JSON-able dict of what was purged and kept).
stream_purged = Signal()
