from django.apps import AppConfig


class ReplicationConfig(AppConfig):
    name = "replication"
    verbose_name = "Streams and replication"

    def ready(self) -> None:
        from replication.services.wakeups import connect_receivers

        connect_receivers()
