from django.urls import URLPattern, path

from portal.web.consumers import ReplicationConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/replication/", ReplicationConsumer.as_asgi()),
]
