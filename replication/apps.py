from django.apps import AppConfig


class ReplicationConfig(AppConfig):
    name = "replication"
    verbose_name = "Streams and replication"

    def ready(self) -> None:
        """Each module whose state a model change alters connects its own receivers."""
        from replication import grants, listings, plans, quotas
        from replication.services import messages, wakeups

        for module in (grants, listings, messages, plans, quotas, wakeups):
            module.connect_receivers()
