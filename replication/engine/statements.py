"""The statements both message stores run, in PostgreSQL's dialect with `%s` placeholders;
`sql()` below turns them into SQLite's. Each store keeps its own schema and the statements
that differ beyond that (bulk writes, COPY, locks)."""

# uuid_send(): a PostgreSQL uuid as its 16 bytes, which is how SQLite stores one already.
_SQLITE_WORDS = {"%s": "?", "greatest(": "max(", "least(": "min(", "octet_length(": "length(",
                 "uuid_send(": "("}


def sql(statement: str, dialect: str) -> str:
    """A statement of this module in the store's dialect ("postgresql" or "sqlite")."""
    if dialect == "sqlite":
        for word, theirs in _SQLITE_WORDS.items():
            statement = statement.replace(word, theirs)
    return statement


TOPIC_IDS = "SELECT id FROM partitions WHERE stream = %s AND topic = %s ORDER BY partition"
MARKS = "SELECT low_offset, next_offset FROM partitions WHERE id = %s"
TS_AT = 'SELECT ts FROM messages WHERE pid = %s AND "offset" = %s'
# Kafka's ListOffsets MAX_TIMESTAMP (KIP-734): of equal timestamps, the earliest offset.
MAX_TS = 'SELECT "offset", ts FROM messages WHERE pid = %s ORDER BY ts DESC, "offset" LIMIT 1'
WATERMARKS = (
    "SELECT partition, low_offset, next_offset FROM partitions "
    "WHERE stream = %s AND topic = %s ORDER BY partition"
)
PARTITION_STATS = """
SELECT p.partition, p.low_offset, p.next_offset, p.rows, p.bytes,
    (SELECT ts FROM messages m WHERE m.pid = p.id AND m."offset" = p.low_offset),
    (SELECT ts FROM messages m WHERE m.pid = p.id AND m."offset" = p.next_offset - 1),
    (SELECT count(*) FROM consumer_cursors c WHERE c.pid = p.id),
    (SELECT min(c."offset") FROM consumer_cursors c WHERE c.pid = p.id)
FROM partitions p WHERE p.stream = %s AND p.topic = %s ORDER BY p.partition
"""
STREAM_SIZE = (
    "SELECT count(DISTINCT topic), coalesce(sum(bytes), 0), coalesce(sum(rows), 0) "
    "FROM partitions WHERE stream = %s"
)
# Every stream's logical size at once (usage and plan figures over a tenant's streams).
LOGICAL_SIZES = "SELECT stream, coalesce(sum(bytes), 0) FROM partitions GROUP BY stream"
# The partitions of some streams that ever held a message, with their watermarks (a
# lag sample's first look: an idle link needs no more); `{}` is the streams' placeholders.
STREAMS_ENDS = (
    "SELECT stream, topic, partition, low_offset, next_offset FROM partitions "
    "WHERE next_offset > 0 AND stream IN ({})"
)
# The partitions retention looks at: an empty one has nothing to expire, and skipping it
# spares a write transaction a partition a pass (100,000 partitions a minute, issue 33).
# The streams holding any message: retention's beat entry enqueues only those.
HOLDING_STREAMS = "SELECT DISTINCT stream FROM partitions WHERE next_offset > low_offset"
STREAM_PIDS = ("SELECT id, topic FROM partitions WHERE stream = %s AND next_offset > low_offset "
               "ORDER BY id")
REPLICATION_CURSOR = "SELECT next_offset FROM replication_cursors WHERE pid = %s AND link = %s"
# A consumer's own commit sets exactly what it committed, back or past the end (as Kafka); only
# replicated cursors are clamped and never move back (the stores' MERGE_CURSORS).
COMMIT_CURSOR = (
    'INSERT INTO consumer_cursors (pid, grp, "offset", metadata, leader_epoch) '
    "VALUES (%s, %s, %s, %s, %s) "
    'ON CONFLICT (pid, grp) DO UPDATE SET "offset" = excluded."offset", '
    "metadata = excluded.metadata, leader_epoch = excluded.leader_epoch"
)
FETCH_CURSOR = 'SELECT "offset" FROM consumer_cursors WHERE pid = %s AND grp = %s'
CURSORS = (
    'SELECT c.grp, p.topic, p.partition, c."offset", c.metadata, c.leader_epoch '
    "FROM consumer_cursors c "
    "JOIN partitions p ON p.id = c.pid WHERE p.stream = %s ORDER BY c.grp, p.topic, p.partition"
)
# CAST, not PostgreSQL's `::`: a NULL filter matches everything, in both dialects.
DELETE_CURSORS = """
DELETE FROM consumer_cursors WHERE (CAST(%s AS text) IS NULL OR grp = %s) AND pid IN (
    SELECT id FROM partitions WHERE stream = %s AND (CAST(%s AS text) IS NULL OR topic = %s)
    AND (CAST(%s AS integer) IS NULL OR partition = %s))
"""
EXPIRE_CUT = """
SELECT min("offset") FILTER (WHERE ts >= %s), max("offset") FROM (
    SELECT "offset", ts FROM messages WHERE pid = %s AND "offset" >= %s
    ORDER BY "offset" LIMIT %s) c
"""
# Retention and purge remove a prefix: the low watermark only rises.
CUT_PREFIX = (
    "UPDATE partitions SET low_offset = greatest(low_offset, %s), rows = rows - %s, "
    "bytes = bytes - %s WHERE id = %s"
)
# diffstreams' repair cuts a partition back to `offset`; its low watermark follows when the
# cut reaches below it, and so do the cursors past it.
TRUNCATE = (
    "UPDATE partitions SET next_offset = %s, low_offset = least(low_offset, %s), "
    "rows = rows - %s, bytes = bytes - %s WHERE id = %s"
)
TRUNCATE_CURSORS = (
    "UPDATE replication_cursors SET next_offset = %s WHERE pid = %s AND next_offset > %s",
    'UPDATE consumer_cursors SET "offset" = %s WHERE pid = %s AND "offset" > %s',
)
# The replicator's sweep (workers/replication/linkcache.py SweepMarks): per stream, figures that
# change whenever its messages, retention or consumer cursors do (a topic made again has new ids).
STREAM_MARKS = """
SELECT stream, count(*), sum(id), sum(next_offset), sum(low_offset) FROM partitions
GROUP BY stream
"""
# The streams with any committed cursor: a tenant-wide groups view reads only those.
CURSOR_STREAMS = """
SELECT DISTINCT p.stream FROM consumer_cursors c JOIN partitions p ON p.id = c.pid
"""
CURSOR_MARKS = """
SELECT p.stream, count(*), sum(c."offset") FROM consumer_cursors c
JOIN partitions p ON p.id = c.pid GROUP BY p.stream
"""
# Links a failover ended (DESIGN.md invariant 10 on the replica's side): their applies refused.
END_LINK = "INSERT INTO ended_links (link) VALUES (%s) ON CONFLICT (link) DO NOTHING"
REOPEN_LINK = "DELETE FROM ended_links WHERE link = %s"
LINK_ENDED = "SELECT 1 FROM ended_links WHERE link = %s"

# --- the batch layout (issue 30): a row per record batch, keyed by (pid, last_offset) ----------

BATCH_COLUMNS = ("base_offset, last_offset, records, first_ts, max_ts, producer_id, epoch, "
                 "base_sequence, attributes, crc, origin, producer, size, data")
# A source partition's batches of [start, end) as a replica stores them (origin as 16 bytes).
SOURCE_BATCHES = f"""
SELECT {BATCH_COLUMNS.replace("origin", "uuid_send(origin)")} FROM batches
WHERE pid = %s AND last_offset >= %s AND base_offset < %s ORDER BY last_offset
"""
# Batches from `offset` on (at most 1,000 rows looked at), the first one always, the next
# while the bytes before each stay within the budget (Kafka's fetch: whole batches; the
# consumer skips what precedes its offset). Fetch counts wire bytes, a read of messages their
# logical bytes, bounded by the offsets it may return. The budget is worked out on the batches'
# lengths alone (octet_length reads no TOAST, SQLite's length() no overflow page) and only the
# batches kept are joined back for their bytes: SQLite reads every column a subquery selects.
FETCH_BATCHES = """
SELECT b.data, b.base_offset, b.records, b.size FROM (
    SELECT pid, last_offset, base_offset, sum(wire) OVER (ORDER BY last_offset) - wire AS ahead
    FROM (SELECT pid, last_offset, base_offset, octet_length(data) AS wire FROM batches
          WHERE pid = %s AND last_offset >= %s ORDER BY last_offset LIMIT 1000) ranged
) k JOIN batches b ON b.pid = k.pid AND b.last_offset = k.last_offset
WHERE k.ahead < %s OR k.base_offset <= %s ORDER BY k.last_offset
"""
READ_BATCHES = """
SELECT b.data, uuid_send(b.origin), b.producer FROM (
    SELECT pid, last_offset, base_offset, sum(size) OVER (ORDER BY last_offset) - size AS ahead
    FROM batches WHERE pid = %s AND last_offset >= %s AND base_offset < %s
) k JOIN batches b ON b.pid = k.pid AND b.last_offset = k.last_offset
WHERE k.ahead < %s OR k.base_offset <= %s ORDER BY k.last_offset
"""
# ListOffsets by time: the first retained batch whose max timestamp reaches the target.
TIME_BATCH = """
SELECT data FROM batches WHERE pid = %s AND last_offset >= %s AND max_ts >= %s
ORDER BY last_offset LIMIT 1
"""
# The batch found first, then its bytes read: a sort would carry every batch's (in SQLite).
MAX_TS_BATCH = """
SELECT data FROM batches WHERE pid = %s AND last_offset = (
    SELECT last_offset FROM batches WHERE pid = %s AND last_offset >= %s
    ORDER BY max_ts DESC, last_offset LIMIT 1)
"""
BATCH_PARTITION_STATS = """
SELECT p.partition, p.low_offset, p.next_offset, p.rows, p.bytes,
    (SELECT first_ts FROM batches b WHERE b.pid = p.id AND b.last_offset >= p.low_offset
     ORDER BY b.last_offset LIMIT 1),
    (SELECT max_ts FROM batches b WHERE b.pid = p.id ORDER BY b.last_offset DESC LIMIT 1),
    (SELECT count(*) FROM consumer_cursors c WHERE c.pid = p.id),
    (SELECT min(c."offset") FROM consumer_cursors c WHERE c.pid = p.id)
FROM partitions p WHERE p.stream = %s AND p.topic = %s ORDER BY p.partition
"""
# Retention: the oldest batches' ends and ages, to find the prefix older than the cut.
OLDEST_BATCHES = """
SELECT last_offset, max_ts, records FROM batches WHERE pid = %s AND last_offset >= %s
ORDER BY last_offset LIMIT %s
"""
# Whole batches ending below the cut (retention, purge); a prefix, bounded by the caller.
DELETE_BATCHES_BELOW = (
    "DELETE FROM batches WHERE pid = %s AND last_offset < %s RETURNING records, size")
# A truncate's batches, with what the one straddling the cut needs to keep its prefix (only
# its bytes come back; SQLite's RETURNING takes no ORDER BY: the caller sorts).
DELETE_BATCHES_FROM = """
DELETE FROM batches WHERE pid = %s AND last_offset >= %s
RETURNING records, size, base_offset, CASE WHEN base_offset < %s THEN data END,
    uuid_send(origin), producer
"""
# One partition's apply (a replicated run): a fresh partition's start, its new end and
# counters, and the link's status cursor (never moved back).
START_AT = "UPDATE partitions SET low_offset = %s, next_offset = %s WHERE id = %s"
ADVANCE_ONE = (
    "UPDATE partitions SET next_offset = greatest(next_offset, %s), rows = rows + %s, "
    "bytes = bytes + %s WHERE id = %s"
)
LINK_CURSOR = """
INSERT INTO replication_cursors (pid, link, next_offset) VALUES (%s, %s, %s)
ON CONFLICT (pid, link) DO UPDATE
SET next_offset = greatest(replication_cursors.next_offset, excluded.next_offset)
"""
