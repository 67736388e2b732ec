"""Kafka consumer groups in the domain: their state and its rules, whichever interface shows them.

- model.py: Kafka's group states, members and what the coordinator answers with;
- coordinator.py: the classic membership protocol's state machine (joins, generations,
  sessions, rebalances), plain asyncio with no wire code: the Kafka listener (broker/) calls it;
- consumer.py and assignors.py: KIP-848's consumer protocol (the coordinator assigns, members
  reconcile by epochs) and its server-side assignors;
- board.py: the coordinator's state published to `KafkaGroup` rows (replication/models/kafka.py)
  for other processes;
- members.py: the live groups and members of a stream, as the portal shows them.

Committed offsets are the message store's cursors (replication/services/cursors.py, groups.py).
"""
