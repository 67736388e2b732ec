"""The Kafka wire-protocol listener (issue 19): stock Kafka clients produce, consume and
administer streams through it. An interface beside the portal: neither imports the other, and
both reach the domain through its services (consumer groups' state and rules included:
replication/groups/). One asyncio process per listener (`manage.py runkafka`, `streamgate kafka
run`); codecs come from kio, generated from Kafka's own message schemas.

- server.py: connections, framing, size and idle limits (limits.py), TLS, presence (nodes.py),
  revoked sign-ins (revocation.py);
- dispatch.py: the handler registry (`@handles(api_key, min, max)`) and request decoding;
- session.py: one Session per connection (user, name resolution, the thread pool for Django);
- apis/: one module per API family; grouping.py: the group handlers' coordinator and keys;
- records.py, codec.py: record batches and the protocol's encoding;
- management/commands: `runkafka`, and `runembedded` (the whole product in one process).
"""
