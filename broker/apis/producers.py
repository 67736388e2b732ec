"""InitProducerId (key 22): producer ids for idempotent producers, from the control database's
sequence (unique across listeners and restarts); a transactional producer's from its
transaction coordinator (broker/apis/transactions.py)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from kio.schema.errors import ErrorCode

from broker.apis.transactions import init_transactional
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.session import Session
from replication.models import KafkaProducerId

MAX_EPOCH = 32766


def producer_id_allocate(actor: AbstractBaseUser, client_id: str) -> int:
    return KafkaProducerId.objects.create(user=actor, client_id=client_id[:255]).pk


def _owns(actor: AbstractBaseUser, producer_id: int) -> bool:
    """Only the user a producer id was given to may bump its epoch (and so fence it)."""
    return KafkaProducerId.objects.filter(pk=producer_id, user=actor).exists()


@handles(22, 0, 4)
async def init_producer_id(session: Session, header: RequestHeader, request: Any) -> Any:
    response = response_class(request)
    if request.transactional_id is not None:
        return await init_transactional(session, request)
    old_id = getattr(request, "producer_id", -1)
    old_epoch = getattr(request, "producer_epoch", -1)
    if old_id >= 0 and 0 <= old_epoch < MAX_EPOCH and await session.run_sync(
            _owns, session.user, old_id):
        # KIP-360: a producer that lost track of its sequences bumps its epoch, keeping its id;
        # the stores then take sequence 0 again under the new epoch.
        return build(response, throttle_time=0, error_code=ErrorCode.none,
                     producer_id=old_id, producer_epoch=old_epoch + 1)
    pid = await session.run_sync(producer_id_allocate, session.user, session.client_id)
    return build(response, throttle_time=0, error_code=ErrorCode.none, producer_id=pid,
                 producer_epoch=0)
