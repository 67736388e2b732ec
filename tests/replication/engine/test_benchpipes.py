"""The replication and Spark benchmarks' store layouts and reference pipes (bench/pipes.py,
issue 30): a backlog loaded through the store's API takes the layout's shape, and each pipe
copies every message of it between two databases."""

import argparse
import uuid

import psycopg
import pytest

from bench import kafka, replication, spark
from bench.pipes import batch_pipe, row_pipe
from bench.values import json_values
from replication.engine import open_store

MESSAGES = 3000


@pytest.mark.parametrize("module", [replication, spark, kafka])
def test_layout_option_defaults_to_batches(module) -> None:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    assert parser.parse_args([]).layout == "batches"
    assert parser.parse_args(["--layout", "rows"]).layout == "rows"
    with pytest.raises(SystemExit):
        parser.parse_args(["--layout", "pages"])


def _loaded(url: str, layout: str) -> uuid.UUID:
    store, stream = open_store(url, layout=layout), uuid.uuid4()
    try:
        replication.load_backlog(store, stream, MESSAGES)
    finally:
        store.close()
    return stream


def test_batch_layout_pipes(pg_batch_url: str, fresh_pg_url: str) -> None:
    open_store(fresh_pg_url, layout="batches").close()
    stream = _loaded(pg_batch_url, "batches")
    with psycopg.connect(pg_batch_url) as conn:  # batches as a producer sends them
        assert conn.execute("SELECT count(*), min(records), max(records) FROM batches "
                            "JOIN partitions ON id = pid WHERE stream = %s",
                            (stream,)).fetchone() == (3, 1000, 1000)
    assert batch_pipe(pg_batch_url, fresh_pg_url, stream, 1000)[1] == MESSAGES
    assert row_pipe(pg_batch_url, fresh_pg_url, stream, "batches", 1000)[1] == MESSAGES
    with psycopg.connect(pg_batch_url) as src, psycopg.connect(fresh_pg_url) as dst:
        assert src.execute("SELECT to_regclass('sgbench_rows')").fetchone()[0] is None
        assert dst.execute("SELECT to_regclass('sgbench_pipe')").fetchone()[0] is None


def test_row_layout_pipe(pg_url: str, fresh_pg_url: str) -> None:
    stream = _loaded(pg_url, "rows")
    assert row_pipe(pg_url, fresh_pg_url, stream, "rows", None)[1] == MESSAGES


def test_pipe_refuses_a_short_copy(pg_batch_url: str, fresh_pg_url: str) -> None:
    open_store(fresh_pg_url, layout="batches").close()
    stream = _loaded(pg_batch_url, "batches")
    with psycopg.connect(pg_batch_url) as conn:  # a partition claims more than it holds
        conn.execute("UPDATE partitions SET next_offset = next_offset + 1 WHERE id = "
                     "(SELECT min(id) FROM partitions WHERE stream = %s)", (stream,))
    with pytest.raises(RuntimeError, match="copied 3000 of 3001"):
        batch_pipe(pg_batch_url, fresh_pg_url, stream, None)


def test_json_values_for_the_lz4_figure() -> None:
    values = json_values(1000, 200)
    assert {len(v) for v in values} == {200}
    assert len(set(values)) == 1000
    assert values == json_values(1000, 200)
    assert values[0].startswith(b'{"event_id":')
