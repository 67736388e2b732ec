"""Template helpers of the operations pages.

`{% open_alarms as alarms %}`: the open alarms of the signed-in user's tenants, for the
overview's alarm fragment (templates/web/_alarms.html), through the tenant-scoping choke point.
`{{ value|as_json }}`: an audit record's before/after as JSON text (escaped by the template)."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.core.serializers.json import DjangoJSONEncoder

from operations.models import Alarm

register = template.Library()
SHOWN = 50


@register.simple_tag(takes_context=True)
def open_alarms(context: dict[str, Any]) -> list[Alarm]:
    request = context.get("request")
    if request is None:
        return []
    return list(Alarm.objects.restrict(request.user).open().order_by("-raised")[:SHOWN])


@register.filter
def as_json(value: Any) -> str:
    return "" if value is None else json.dumps(value, cls=DjangoJSONEncoder, sort_keys=True)
