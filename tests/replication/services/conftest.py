"""The services' tests on either store layout."""

from __future__ import annotations

import uuid

import pytest

from replication.engine.factory import create_database, open_store
from replication.stores import default_store_url


@pytest.fixture
def layout(request, sanfrancisco, newyork) -> str:
    """The clusters' store layout: rows unless a test asks for batches (issue 30,
    `@pytest.mark.parametrize("layout", [...], indirect=True)`). Both clusters get fresh
    stores made in the chosen layout explicitly, so STREAMGATE_STORE_LAYOUT in the
    environment cannot turn a "rows" case into a batch one."""
    chosen = getattr(request, "param", "rows")
    tag = uuid.uuid4().hex[:8]
    for cluster in (sanfrancisco, newyork):
        cluster.store_url = default_store_url(f"{cluster.name}_{chosen}_{tag}")
        create_database(cluster.store_url)
        open_store(cluster.store_url, layout=chosen).close()
        cluster.save(update_fields=["store_url"])
    return chosen
