from django.apps import AppConfig


class BrokerConfig(AppConfig):
    """A Django app for its management commands (`runkafka`, `runembedded`); it has no models."""

    name = "broker"
    verbose_name = "Kafka listener"
