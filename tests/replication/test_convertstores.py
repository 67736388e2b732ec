"""`manage.py convertstores` (issue 30): each cluster's row store converted to the batch layout,
its progress shown, a second run changing nothing."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.management import CommandError, call_command

from replication.engine import Record, create_database, open_store
from replication.stores import store_url
from tests.factories import ClusterFactory


@pytest.mark.django_db
@pytest.mark.parametrize("database", ["postgres", "sqlite"])
def test_convertstores_converts_each_row_store_and_shows_its_progress(database, tmp_path):
    sqlite = f"sqlite:///{tmp_path / 'legacy.sqlite3'}" if database == "sqlite" else ""
    cluster = ClusterFactory(name="legacy", store_url=sqlite)
    url = store_url(cluster)
    create_database(url)
    rows = open_store(url, layout="rows")
    stream = uuid.uuid4()
    rows.ensure_topic(stream, "t", 2)
    rows.append(stream, "t", [Record(b"v%d" % i) for i in range(10)], origin=stream)
    rows.close()
    out = io.StringIO()
    call_command("convertstores", "--cluster", "legacy", stdout=out)
    assert "legacy: 2/2 partitions (100%)" in out.getvalue()
    assert "converted 10 messages of 2 partitions" in out.getvalue()
    batches = open_store(url)
    assert batches.DATA_TABLE == "batches"
    assert sum(high for _, high in batches.watermarks(stream, "t").values()) == 10
    batches.close()
    again = io.StringIO()
    call_command("convertstores", "--cluster", "legacy", stdout=again)
    assert "legacy: already a batch store" in again.getvalue()


@pytest.mark.django_db
def test_convertstores_names_an_unknown_cluster():
    with pytest.raises(CommandError, match="no cluster nowhere"):
        call_command("convertstores", "--cluster", "nowhere")
