"""What `-networkcompression` and `-networkencryption` can mean here (DESIGN.md invariant 8).

streamgate has no wire protocol of its own: a gateway reads the source cluster's message store
and writes the replica's over their database connections (the replicator reads both ends'
watermarks the same way). So:

- compression: PostgreSQL's protocol does not compress (libpq's `sslcompression` is gone), so
  only `off` is true; any other value is refused with the reason.
- encryption: it is TLS on those connections, which the cluster's store URL decides
  (`sslmode`). `true` is accepted only when every store the messages cross insists on TLS
  (`require`, `verify-ca` or `verify-full`), and a gateway refuses to apply a batch of such a
  link if a store URL was changed since to allow plaintext. A SQLite store is a local file:
  its messages cross no network.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from replication.errors import NotSupported
from replication.models import Cluster, Compression, ReplicaLink, Stream
from replication.stores import store_url

TLS_SSLMODES = frozenset({"require", "verify-ca", "verify-full"})
REFUSAL_CACHE_SECONDS = 5.0

_refusals: dict[int, tuple[float, str | None]] = {}
_refusals_lock = threading.Lock()


def store_encrypted(cluster: Cluster) -> bool:
    """Whether every connection to the cluster's store is TLS (or it has no network at all)."""
    url = store_url(cluster)
    if url.startswith("sqlite:"):
        return True
    modes = parse_qs(urlsplit(url).query).get("sslmode", [""])
    return modes[-1] in TLS_SSLMODES


def _unencrypted(source: Stream, replica: Stream) -> list[str]:
    clusters = {source.cluster.name: source.cluster, replica.cluster.name: replica.cluster}
    return [name for name, cluster in sorted(clusters.items()) if not store_encrypted(cluster)]


def encryption_refusal(source: Stream, replica: Stream) -> str | None:
    plain = _unencrypted(source, replica)
    if not plain:
        return None
    names = " and ".join(plain)
    return (f"-networkencryption true needs TLS on every connection the messages cross, and "
            f"the message store of cluster {names} does not require it: an operator adds "
            "sslmode=verify-full (or require) to the cluster's store URL in the admin site; "
            "until then give -networkencryption false")


def check_wire_options(values: dict[str, Any], *, source: Stream, replica: Stream) -> None:
    """Refuse the wire options this link cannot honour, saying why and what to do instead."""
    compression = values.get("networkcompression")
    if compression not in (None, Compression.OFF):
        raise NotSupported(
            f"-networkcompression {compression} is not supported: gateways read the source "
            "cluster's message store over a PostgreSQL connection, and PostgreSQL's protocol "
            "does not compress; give -networkcompression off (the default)",
            field="networkcompression")
    if values.get("networkencryption"):
        refusal = encryption_refusal(source, replica)
        if refusal:
            raise NotSupported(refusal, field="networkencryption")


def link_wire_refusal(*, link_id: int) -> str | None:
    """Why a gateway must not apply this link's batches now, or None. Cached for a few
    seconds per link: the gateway asks for every batch."""
    now = time.monotonic()
    with _refusals_lock:
        cached = _refusals.get(link_id)
    if cached is not None and cached[0] > now:
        return cached[1]
    link = (ReplicaLink.objects.filter(pk=link_id)
            .select_related("source__cluster", "replica__cluster").first())
    refusal = None
    if link is not None and link.networkencryption:
        refusal = encryption_refusal(link.source, link.replica)
    with _refusals_lock:
        _refusals[link_id] = (now + REFUSAL_CACHE_SECONDS, refusal)
    return refusal
