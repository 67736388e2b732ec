"""Long lists a page at a time (?page=N, 100 rows): a tenant of 1,000 streams gets the streams
list and the usage table in well under the pages' 150 ms, where rendering every row took
several hundred (docs/benchmarks.md, `python -m bench pages`). Search and the CSV export still
cover everything."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest

PER_PAGE = 100


def paged(request: HttpRequest, items: Sequence[Any] | Any,
          per_page: int = PER_PAGE) -> dict[str, Any]:
    """{"page": the rows of the page asked for (the last for one past it, the first for
    nonsense), "pager": links' data for web/_pager.html}."""
    page = Paginator(items, per_page).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    keep = query.urlencode()
    return {"page": page.object_list, "pager": {
        "page": page, "many": page.paginator.num_pages > 1,
        "keep": f"{keep}&" if keep else "", "count": page.paginator.count}}
