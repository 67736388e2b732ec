from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Operations: alarms and audit trail"

    def ready(self) -> None:
        from operations import alarms, audit
        from replication.signals import stream_expiring

        audit.connect_receivers()
        alarms.connect_receivers()
        stream_expiring.connect(alarms.on_stream_expiring, dispatch_uid="retention_check")
