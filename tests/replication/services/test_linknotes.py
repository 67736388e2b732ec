"""The replicator's and gateways' notes on links (last error, progress, waiting): written in
autocommit as the engine runs, and never queued behind another transaction that holds the
link's row (issue 26: replicators' error updates waited 8.5 minutes behind a failover)."""

import time

import psycopg
import pytest

from replication.models import ReplicaLink
from replication.services import replica_add
from replication.services.linknotes import link_error, link_progress, link_waiting

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def link(owner, activity, activity_ny) -> ReplicaLink:
    return replica_add(actor=owner, source=activity, replica=activity_ny)


def _error(link: ReplicaLink) -> str:
    return ReplicaLink.objects.get(pk=link.pk).last_error


def test_notes_are_written_outside_any_transaction(link):
    link_error(link_id=link.pk, error="cannot plan batches: store down", gateway="gw1")
    assert _error(link) == "cannot plan batches: store down"
    link_waiting(link_ids=[link.pk], cluster="newyork")
    assert _error(link) == "waiting: no live gateway on cluster newyork"
    link_progress(link_ids=[link.pk])
    refreshed = ReplicaLink.objects.get(pk=link.pk)
    assert refreshed.last_error == "" and refreshed.last_progress is not None


def test_a_note_skips_a_link_another_transaction_holds_instead_of_waiting(link):
    from tests.workers.conftest import test_database_url

    link_error(link_id=link.pk, error="first")
    with psycopg.connect(test_database_url()) as other:
        other.execute("SELECT 1 FROM replication_replicalink WHERE id = %s FOR UPDATE",
                      (link.pk,))
        started = time.monotonic()
        link_error(link_id=link.pk, error="second")
        link_progress(link_ids=[link.pk])
        assert time.monotonic() - started < 1  # it would wait until the holder ends
        other.rollback()
    assert _error(link) == "first"  # skipped: the link's next event writes it again
    link_error(link_id=link.pk, error="third")
    assert _error(link) == "third"
