"""Every API family's handlers, registered by importing its module.

kafka-core: versions, sasl, credentials, metadata, admin, configs; kafka-data: produce,
fetch, offsets, producers; kafka-groups: groups, commits; the admin surface: cluster,
groupadmin, records_admin. A module another branch has not delivered yet is skipped, so each
branch adds only its own module files; a module that fails for any other reason fails the
listener's start.
"""

from __future__ import annotations

from importlib import import_module

MODULES = ("versions", "sasl", "credentials", "metadata", "admin", "produce", "fetch", "offsets",
           "producers", "groups", "commits", "configs", "cluster", "groupadmin",
           "records_admin")

for _name in MODULES:
    try:
        import_module(f"{__name__}.{_name}")
    except ModuleNotFoundError as _error:
        if _error.name != f"{__name__}.{_name}":
            raise
