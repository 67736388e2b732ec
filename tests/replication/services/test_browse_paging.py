"""The message browser's paging (replication/services/browse.py) on both store layouts: paged
older from the top and newer back, every matching message is shown exactly once, in either
display order, with filters, with timestamps out of order within a partition; a page started
at an offset or a time reads forward from there, and pages on past it both ways."""

from __future__ import annotations

import dataclasses
import time

import pytest

from replication.engine.store import Record
from replication.services import topic_create
from replication.services.browse import BrowseQuery, BrowseResult, messages_browse
from replication.services.messages import messages_produce

BOTH_LAYOUTS = pytest.mark.parametrize("layout", ["rows", "batches"], indirect=True)
BASE = int(time.time() * 1000) - 3_600_000
COUNT = 61


@pytest.fixture
def events(layout, owner, activity) -> list[tuple[int, int]]:
    """61 messages over 3 partitions (in batches of 10 per produce), each partition's times
    mostly rising but every 7th message stamped 5 minutes early; (partition, offset) of each."""
    topic_create(actor=owner, stream=activity, name="events", partitions=3)
    placed = []
    for first in range(0, COUNT, 10):
        records = [Record(f"v{i}".encode(), key=f"k{i % 2}".encode(), partition=i % 3,
                          timestamp_ms=BASE + i * 1000 - (300_000 if i % 7 == 0 else 0))
                   for i in range(first, min(first + 10, COUNT))]
        placed += messages_produce(actor=owner, stream=activity, topic="events",
                                   records=records)
    return placed


def browse(owner, activity, **query) -> BrowseResult:  # type: ignore[no-untyped-def]
    return messages_browse(actor=owner, stream=activity,
                           q=BrowseQuery(topic="events", **query))


def walk(owner, activity, first: BrowseQuery, way: str) -> list[list[tuple[int, int]]]:
    """Every page from `first` on, paging `way` ("older" or "newer") until there is none."""
    pages = []
    q = first
    while True:
        result = messages_browse(actor=owner, stream=activity, q=q)
        pages.append([(m.partition, m.offset) for m in result.messages])
        assert len(pages) < 100
        if not getattr(result, f"has_{way}"):
            return pages
        position = getattr(result, way)
        q = dataclasses.replace(first, before=position if way == "older" else None,
                                after=position if way == "newer" else None,
                                at_offset=None, at_ms=None)


@BOTH_LAYOUTS
@pytest.mark.parametrize("newest_first", [True, False])
def test_paging_from_one_end_and_back_from_the_other_shows_every_message_once(
        owner, activity, events, newest_first):
    """Newest first, the browser opens at the top and pages older; oldest first, at the start
    and pages newer. From the far end, paging the other way leads back."""
    way, back_way = ("older", "newer") if newest_first else ("newer", "older")
    pages = walk(owner, activity, BrowseQuery(topic="events", limit=7,
                                              newest_first=newest_first), way)
    shown = [m for page in pages for m in page]
    assert sorted(shown) == sorted(events) and len(shown) == COUNT
    assert all(len(page) == 7 for page in pages[:-1]) and len(pages) == 9
    end = {p: 0 for p in range(3)} if newest_first else {p: 10**9 for p in range(3)}
    far = BrowseQuery(topic="events", limit=7, newest_first=newest_first,
                      after=end if newest_first else None,
                      before=None if newest_first else end)
    back = walk(owner, activity, far, back_way)
    assert sorted(m for page in back for m in page) == sorted(events)
    assert len(back) == 9 and back[0] != pages[0]


@BOTH_LAYOUTS
def test_filters_hold_across_pages(owner, activity, events):
    pages = walk(owner, activity, BrowseQuery(topic="events", limit=4, key="k1",
                                              from_offset=3), "older")
    shown = sorted(m for page in pages for m in page)
    # i odd (key k1) with offset i // 3 >= 3, i.e. i >= 9
    wanted = sorted((i % 3, i // 3) for i in range(9, COUNT) if i % 2 == 1)
    assert shown == wanted


@BOTH_LAYOUTS
def test_a_page_starts_at_an_offset_or_a_time_and_pages_on_both_ways(owner, activity, events):
    at = browse(owner, activity, partition=1, at_offset=5, limit=3, newest_first=False)
    assert [(m.partition, m.offset) for m in at.messages] == [(1, 5), (1, 6), (1, 7)]
    assert at.older == {1: 5} and at.newer == {1: 8} and at.has_older and at.has_newer
    older = browse(owner, activity, partition=1, before=at.older, limit=3, newest_first=False)
    assert [m.offset for m in older.messages] == [2, 3, 4]  # shown in the page's order
    # message 30 (partition 0, offset 10) is at BASE + 30 s; 28 is stamped 5 minutes early
    timed = browse(owner, activity, partition=0, at_ms=BASE + 30_000, limit=2)
    assert [m.offset for m in timed.messages] == [11, 10]  # newest first, from offset 10 on
    empty = browse(owner, activity, at_offset=10_000)
    assert empty.messages == [] and empty.has_older and not empty.has_newer
