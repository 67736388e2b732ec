"""The transaction coordinator's services (issue 31) on a batch store: a decision left by a
listener that died is completed by another exactly once (markers and offsets), produceperm and
consumeperm are asked of the partitions and offsets a transaction takes, and a transactional
id stays its tenant's."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from replication.models import KafkaTransaction, TxnState
from replication.services.topics import topic_create
from replication.services.transactions import (
    TxnIdRefused,
    TxnProducer,
    txn_add_offsets,
    txn_add_partitions,
    txn_complete,
    txn_end,
    txn_expire,
    txn_init,
    txn_offset_commit,
)
from replication.stores import store_for
from tests.replication.engine.test_batchstore import _transactional
from tests.replication.engine.test_txnmarkers import _counted

BATCHES = pytest.mark.parametrize("layout", ["batches"], indirect=True)


@pytest.fixture
def ongoing(layout, owner, activity):  # type: ignore[no-untyped-def]
    """alice's transaction "svc-tx": two records in each of clicks' two partitions, and
    group g's offset 2 on partition 0, all pending."""
    topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    store = store_for(activity.cluster)
    store.ensure_topic(activity.uuid, "clicks", 2)
    pid, epoch = txn_init(actor=owner, who=TxnProducer("svc-tx", -1, -1), timeout_ms=60_000)
    who = TxnProducer("svc-tx", pid, epoch)
    problems = txn_add_partitions(actor=owner, who=who, partitions=[
        (activity, "clicks", 0), (activity, "clicks", 1)])
    assert not any(problems.values())
    for p in (0, 1):
        store.append_batches(activity.uuid, "clicks", {p: _transactional(2, pid, 0)},
                             origin=activity.uuid)
    txn_add_offsets(actor=owner, who=who, group="g")
    txn_offset_commit(actor=owner, who=who, group="g", stream=activity,
                      commits=[("clicks", 0, 2, "", 1)])
    return who


def _ends(stream) -> dict[int, int]:  # type: ignore[no-untyped-def]
    marks = store_for(stream.cluster).watermarks(stream.uuid, "clicks")
    return {p: high for p, (_, high) in marks.items()}


@BATCHES
def test_a_commit_decided_by_a_listener_that_died_is_completed_once_by_another(
        ongoing, activity):
    rows = KafkaTransaction.objects.filter(transactional_id="svc-tx")
    # EndTxn's decision saved, then the listener killed -9 before any marker:
    rows.update(state=TxnState.PREPARE_COMMIT,
                updated=timezone.now() - datetime.timedelta(seconds=30))
    assert txn_expire() == 1
    assert rows.get().state == TxnState.COMPLETE_COMMIT
    assert _ends(activity) == {0: 3, 1: 3}  # a COMMIT marker after each partition's records
    store = store_for(activity.cluster)
    assert store.txn_view(activity.uuid, "clicks", 0, 0, 3) == (3, [])
    assert [c for c in store.cursors(activity.uuid) if c[0] == "g"] == [("g", "clicks", 0, 2)]
    assert [c.leader_epoch for c in store.commits(activity.uuid)] == [1]  # as committed
    rows.update(state=TxnState.PREPARE_COMMIT)  # a second listener completing it at once
    txn_complete(pk=rows.get().pk)
    assert _ends(activity) == {0: 3, 1: 3}  # no second marker


@BATCHES
def test_end_txn_writes_the_markers_and_offsets_of_a_store_in_one_store_transaction(
        ongoing, owner, activity):
    writes = _counted(store_for(activity.cluster))
    txn_end(actor=owner, who=ongoing, commit=True)
    assert writes == [1]  # two markers and an offset: one commit, not three
    assert _ends(activity) == {0: 3, 1: 3}
    assert KafkaTransaction.objects.get(transactional_id="svc-tx").state == \
        TxnState.COMPLETE_COMMIT
    assert [c for c in store_for(activity.cluster).cursors(activity.uuid) if c[0] == "g"] == \
        [("g", "clicks", 0, 2)]


@BATCHES
def test_offsets_saved_before_epochs_were_kept_commit_with_none(ongoing, activity):
    rows = KafkaTransaction.objects.filter(transactional_id="svc-tx")
    rows.update(state=TxnState.PREPARE_COMMIT, offsets=[[activity.pk, "g", "clicks", 0, 2, ""]],
                updated=timezone.now() - datetime.timedelta(seconds=30))
    assert txn_expire() == 1
    [cursor] = [c for c in store_for(activity.cluster).commits(activity.uuid) if c.group == "g"]
    assert (cursor.offset, cursor.leader_epoch) == (2, -1)


@BATCHES
def test_an_expired_transaction_is_aborted_its_offsets_dropped_and_its_producer_fenced(
        ongoing, activity):
    rows = KafkaTransaction.objects.filter(transactional_id="svc-tx")
    rows.update(started=timezone.now() - datetime.timedelta(minutes=5))
    assert txn_expire() == 1
    txn = rows.get()
    assert (txn.state, txn.epoch) == (TxnState.COMPLETE_ABORT, ongoing.epoch + 1)
    store = store_for(activity.cluster)
    assert store.txn_view(activity.uuid, "clicks", 1, 0, 3) == (3, [(ongoing.producer_id, 0)])
    assert not [c for c in store.cursors(activity.uuid) if c[0] == "g"]


@BATCHES
def test_partitions_need_produceperm_and_the_id_stays_its_tenants(
        layout, owner, member, outsider, activity):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    pid, epoch = txn_init(actor=member, who=TxnProducer("bob-tx", -1, -1), timeout_ms=60_000)
    problems = txn_add_partitions(actor=member, who=TxnProducer("bob-tx", pid, epoch),
                                  partitions=[(activity, "clicks", 0)])
    assert problems[(activity.pk, "clicks", 0)].kafka_error == "topic_authorization_failed"
    assert KafkaTransaction.objects.get(transactional_id="bob-tx").partitions == []
    with pytest.raises(TxnIdRefused, match="belongs to another tenant"):
        txn_init(actor=outsider, who=TxnProducer("bob-tx", -1, -1), timeout_ms=60_000)
