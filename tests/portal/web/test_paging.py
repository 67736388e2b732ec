"""The streams list and the usage table a page of 100 rows at a time: every row on exactly one
page, the search and the period kept from page to page, the CSV still whole."""

from __future__ import annotations

import re

from replication.models import Stream
from tests.clients import signed_in


def many(owner, cluster, count: int) -> None:  # type: ignore[no-untyped-def]
    tenant = owner.memberships.get().tenant
    Stream.objects.bulk_create(
        Stream(path=f"/mapr/{cluster.name}/s{i:03d}", cluster=cluster, name=f"s{i:03d}",
               tenant=tenant, created_by=owner, adminperm="u:alice") for i in range(count))


def paths(page: str) -> list[str]:
    return re.findall(r"<code>(/mapr/[^<]+)</code>", page)


def test_the_streams_list_pages_by_100_and_keeps_the_search(owner, sanfrancisco):
    many(owner, sanfrancisco, 130)
    client = signed_in(owner)
    first = client.get("/streams/").content.decode()
    second = client.get("/streams/?page=2").content.decode()
    assert len(paths(first)) == 100 and len(paths(second)) == 30
    assert set(paths(first)) | set(paths(second)) == set(
        Stream.objects.values_list("path", flat=True))
    assert "Rows 1 to 100 of 130 (page 1 of 2)" in first and 'href="?page=2"' in first
    searched = client.get("/streams/?q=s1").content.decode()  # s100 to s129
    assert len(paths(searched)) == 30 and 'class="pager"' not in searched
    wide = client.get("/streams/?q=/s").content.decode()
    assert 'href="?q=%2Fs&amp;page=2"' in wide
    assert len(paths(client.get("/streams/?q=/s&page=2").content.decode())) == 30
    assert client.get("/streams/?page=99").status_code == 200  # the last page


def test_the_usage_table_pages_and_the_csv_stays_whole(owner, sanfrancisco):
    many(owner, sanfrancisco, 120)
    client = signed_in(owner)
    page = client.get("/usage/?days=7").content.decode()
    assert page.count('<tr data-path="') == 100
    assert 'href="?days=7&amp;page=2"' in page or 'href="?days=7&page=2"' in page
    assert client.get("/usage/?days=7&page=2").content.decode().count('<tr data-path="') == 20
    csv = client.get("/usage.csv?days=7").content.decode()
    assert len(csv.strip().splitlines()) == 121


def test_the_usage_pages_queries_do_not_grow_with_the_tenants_streams(
        owner, sanfrancisco, django_assert_max_num_queries):
    """Issue 34: the page's figures are read for its 100 streams in bulk, the plan's stored
    bytes from two columns of every stream: 400 streams take the queries 120 do."""
    many(owner, sanfrancisco, 120)
    client = signed_in(owner)
    client.get("/usage/")
    with django_assert_max_num_queries(20) as few:
        client.get("/usage/")
    tenant = owner.memberships.get().tenant
    Stream.objects.bulk_create(
        Stream(path=f"/mapr/{sanfrancisco.name}/t{i:03d}", cluster=sanfrancisco,
               name=f"t{i:03d}", tenant=tenant, created_by=owner, adminperm="u:alice")
        for i in range(280))
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = client.get("/usage/?page=4").content.decode()
    assert page.count('<tr data-path="') == 100 and "Rows 301 to 400 of 400" in page
