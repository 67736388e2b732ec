from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Operations: alarms and audit trail"

    def ready(self) -> None:
        from operations import alarms, audit

        audit.connect_signals()
        alarms.connect_signals()
