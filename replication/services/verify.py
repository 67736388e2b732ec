"""Continuous verification of agreed replica links (issue 16): before anyone fails over, they
need to know the replica is right.

Each run compares, per partition of every topic the link carries, the replica with its source
with diffstreams' checksums (replication/services/compare.py) over the replicated prefix,
starting where the last run stopped: offsets are written once and only a repair (store
truncate) rewrites them, so what was found equal stays equal and a run costs what was written
since (bounded by VERIFY_MAX_MESSAGES per link). The result lands on the link (lastVerified,
verifiedUpTo in `stream replica list`); a divergence is kept as `verify_error`, which the
alarm evaluator raises with its first differing offset (operations/alarms.py), until a repair
(`replica_repair`: the link's diffstreams -repair true, then a verification of what it
recopied) clears it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.utils import timezone

from replication.errors import Conflict, Hint, NotFound, PermissionDenied, replicas_of
from replication.models import ReplicaLink, Stream, carried_topics
from replication.services.compaction import compacted_difference, compacted_topics
from replication.services.compare import Span, first_differences, marks_of
from replication.stores import store_for

CLAIM_SECONDS = 900  # a run that died holding its claim frees the link after this


class Busy(Conflict):
    """Another run verifies this link right now."""


@contextmanager
def _claim(link: ReplicaLink) -> Iterator[None]:
    """One run per link at a time, across processes (two beats, beat and "Verify now"): two
    runs would start from the same verifiedUpTo, and the one recording last could move it
    back past what the other found. A row lock would do it too, but would hold the link's
    row (which replicators update) for the whole comparison."""
    key = f"verify-link:{link.pk}"
    if not cache.add(key, 1, timeout=CLAIM_SECONDS):
        raise Busy(f"{link.replica.path} is being verified right now", field="replica",
                   hint=Hint("replica.list", "see its result among the source's replicas",
                             {"path": link.source.path}, cli="see its result with {command}"))
    try:
        yield
    finally:
        cache.delete(key)


def link_verify(*, link: ReplicaLink) -> dict[str, Any]:
    """Verify the link's replicated prefix from where the last run stopped; record and
    return the result (`messagesChecked`, `firstDifference` or None, ...)."""
    with _claim(link):
        # Re-read under the claim: a run that just ended moved verifiedUpTo.
        link.refresh_from_db(fields=["verified_upto", "last_verified"])
        return _verify(link)


def _verify(link: ReplicaLink) -> dict[str, Any]:
    source, replica = link.source, link.replica
    src, dst = store_for(source.cluster), store_for(replica.cluster)
    topics = carried_topics(replica.uuid, dict(source.topics.values_list("name", "origin_uuid")))
    upto, budget = dict(link.verified_upto), settings.VERIFY_MAX_MESSAGES
    began, spans = time.monotonic(), []
    for topic in sorted(topics):
        theirs, mine = marks_of(src, source.uuid, topic), marks_of(dst, replica.uuid, topic)
        for partition in sorted(mine):
            (s_low, s_high), (r_low, r_high) = theirs.get(partition, (0, 0)), mine[partition]
            stop = min(s_high, r_high)  # the replicated prefix; beyond it is lag, not error
            start = min(max(upto.get(f"{topic}:{partition}", 0), s_low, r_low), stop)
            end = min(stop, start + max(budget, 0))  # (a repair may have cut back: min)
            spans.append(Span(topic, partition, start, end))
            budget -= end - start
    checked, difference = 0, None
    for span, found in zip(spans, _differences(source, replica, spans), strict=True):
        checked += found - span.start
        upto[f"{span.topic}:{span.partition}"] = found
        if found < span.end and difference is None:
            difference = {"topic": span.topic, "partition": span.partition, "offset": found}
    return _record(link, upto, difference, checked, began)


def _differences(source: Stream, replica: Stream, spans: list[Span]) -> list[int]:
    """Each span's first differing offset (its end where equal): diffstreams' comparison,
    and for a compacted topic its view's (`compacted_difference`: each copy compacts on its
    own schedule, so their records differ while what they stand for does not)."""
    compacted = compacted_topics(source)
    plain = [s for s in spans if s.topic not in compacted]
    found = dict(zip(plain, first_differences(source, replica, plain), strict=True))
    for s in spans:
        if s.topic in compacted and s.end > s.start:
            at = compacted_difference(source, replica, s.topic, s.partition, s.end)
            found[s] = s.end if at is None else max(at, s.start)
    return [found.get(s, s.end) for s in spans]


def _record(link: ReplicaLink, upto: dict[str, int], difference: dict | None, checked: int,
            began: float) -> dict[str, Any]:
    error = ""
    if difference is not None:
        error = (f"{link.replica.path} differs from {link.source.path} at {difference['topic']} "
                 f"partition {difference['partition']} offset {difference['offset']}: repair "
                 "the replica from its source")
    values = {"last_verified": timezone.now(), "verified_upto": upto, "verify_error": error,
              "verify_duration_ms": int((time.monotonic() - began) * 1000)}
    # update(), not save(): runtime state, like the link's progress (not audited).
    ReplicaLink.objects.filter(pk=link.pk).update(**values)
    for name, value in values.items():
        setattr(link, name, value)
    return {"lastVerified": values["last_verified"].isoformat(), "verifiedUpTo": upto,
            "messagesChecked": checked, "firstDifference": difference,
            "durationMs": values["verify_duration_ms"], "error": error}


def replica_verify(*, actor: AbstractBaseUser, source: Stream, replica: Stream,
                   interval: int | None = None) -> dict[str, Any]:
    """Verify now (on demand), and set the link's interval when given. The owner of either
    end may: the replica's owner is the one deciding whether to fail over to it."""
    try:
        source.require(actor, "adminperm", action="verify replicas")
    except PermissionDenied:
        replica.require(actor, "adminperm", action="verify this replica")
    link = agreed_link(source, replica, doing="verify")
    if interval is not None:
        link.verify_interval = interval
        link.save(update_fields=["verify_interval"])  # configuration: audited
    return link_verify(link=link)


def agreed_link(source: Stream, replica: Stream, *, doing: str) -> ReplicaLink:
    """The agreed link source -> replica, or the error saying why there is none."""
    link = (ReplicaLink.objects.with_agreement().filter(source=source, replica=replica)
            .select_related("source__cluster", "replica__cluster").first())
    if link is None:
        raise NotFound(f"{replica.path} is not a replica of {source.path}", field="replica",
                       hint=replicas_of(source.path))
    if not link.agreed:
        raise Conflict(f"{replica.path} has not accepted {source.path} as its upstream, so it "
                       f"holds nothing of it to {doing}", field="replica")
    return link


def link_repaired(*, link: ReplicaLink, repaired: list[dict[str, Any]]) -> dict[str, Any] | None:
    """After a repair (diffstreams -repair of the link): verify again from where each
    repaired partition was cut back, so the divergence alarm clears, or names what still
    differs. None when another run verifies the link right now (it sees the repair too)."""
    try:
        with _claim(link):
            link.refresh_from_db(fields=["verified_upto", "last_verified"])
            upto = dict(link.verified_upto)
            for fixed in repaired:
                key = f"{fixed['topic']}:{fixed['partition']}"
                upto[key] = min(upto.get(key, fixed["from"]), fixed["from"])
            link.verified_upto = upto
            return _verify(link)
    except Busy:
        return None


def links_verify_due(*, now: datetime | None = None) -> int:
    """Beat's entry: verify each agreed link whose interval has passed; returns how many
    this run verified (a link another run verifies at once is left to it)."""
    now = now or timezone.now()
    links = (ReplicaLink.objects.agreed().filter(verify_interval__gt=0)
             .select_related("source__cluster", "replica__cluster"))
    done = 0
    for link in links:
        if not _due(link, now):
            continue
        try:
            with _claim(link):
                link.refresh_from_db(fields=["verified_upto", "last_verified"])
                if _due(link, now):  # not verified meanwhile by another run
                    _verify(link)
                    done += 1
        except Busy:
            continue  # another beat's run has it
    return done


def _due(link: ReplicaLink, now: datetime) -> bool:
    return (link.last_verified is None
            or link.last_verified + timedelta(seconds=link.verify_interval) <= now)
