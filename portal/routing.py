from django.urls import URLPattern

# Websocket consumers arrive with the browser portal; the router is in place so the
# origin and auth wrapping is fixed from the start.
websocket_urlpatterns: list[URLPattern] = []
