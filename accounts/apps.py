from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    label = "accounts"
    verbose_name = "Tenants and accounts"

    def ready(self) -> None:
        from accounts import sessions, sockets

        sockets.connect_receivers()
        sessions.connect_receivers()
