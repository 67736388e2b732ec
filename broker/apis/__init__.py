"""Every API family's handlers, registered by importing its module.

kafka-core: versions, sasl, credentials, metadata, admin, configs; kafka-data: produce,
fetch, offsets, producers, transactions; kafka-groups: groups, consumergroups, commits; the
admin surface: cluster, groupadmin, records_admin, acls.
"""

from __future__ import annotations

from importlib import import_module

MODULES = ("versions", "sasl", "credentials", "metadata", "admin", "produce", "fetch", "offsets",
           "producers", "groups", "consumergroups", "commits", "configs", "cluster", "groupadmin",
           "records_admin", "acls", "transactions")

for _name in MODULES:
    import_module(f"{__name__}.{_name}")
