from django.urls import path

from portal.rest.views import MaprRestView

# One view for every command: the path after /rest/ names the command ("stream/replica/add").
urlpatterns = [
    path("", MaprRestView.as_view(), name="rest-index"),
    path("<path:command>", MaprRestView.as_view(), name="rest-command"),
]
