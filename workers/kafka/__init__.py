"""The Kafka wire-protocol listener (issue 19): stock Kafka clients produce, consume and
administer streams through it. One asyncio process per listener (`manage.py runkafka`,
`streamgate kafka run`); codecs come from kio, generated from Kafka's own message schemas.

- server.py: connections, framing, size and idle limits, TLS, presence;
- dispatch.py: the handler registry (`@handles(api_key, min, max)`) and request decoding;
- session.py: one Session per connection (user, name resolution, the thread pool for Django);
- apis/: one module per API family.
"""
